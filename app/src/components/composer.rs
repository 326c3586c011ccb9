//! The composer: Enter sends, Shift+Enter adds a line; disabled, with the reason, while it
//! cannot send.
use super::state::Chat;
use crate::api;
use crate::client::{fetch_json, ClientError};
use crate::wire::{PostMessage, Receipt};
use leptos::prelude::*;

#[component]
pub fn Composer(session_id: Memo<crate::wire::SessionId>) -> impl IntoView {
    let chat = expect_context::<Chat>();
    let text = RwSignal::new(String::new());
    let sending = RwSignal::new(false);
    let error = RwSignal::new(None::<String>);
    let hydrated = super::use_hydrated();
    let reason = move || {
        if !hydrated.get() {
            Some("Loading…")
        } else if chat.session().with(|s| s.is_none()) {
            Some("Opening the session…")
        } else if sending.get() {
            Some("Sending…")
        } else {
            None
        }
    };
    let send = move || {
        let content = text.get_untracked();
        if content.trim().is_empty() || reason().is_some() {
            return;
        }
        sending.set(true);
        let sid = session_id.get_untracked();
        leptos::task::spawn_local(async move {
            let body = serde_json::to_string(&PostMessage { content }).ok();
            let res: Result<Receipt, ClientError> = fetch_json(
                api::POST_MESSAGE.method(),
                &api::POST_MESSAGE.url(&[sid.as_str()]),
                body,
            )
            .await;
            sending.set(false);
            match res {
                Ok(_) => {
                    text.set(String::new());
                    error.set(None);
                }
                Err(e) => error.set(Some(e.explain())),
            }
        });
    };
    let hint = move || match chat.running_run().map(|r| r.status) {
        Some(crate::wire::RunStatus::AwaitingApproval) => {
            "A tool call waits for your approval: your message will queue behind it."
        }
        Some(_) => "A reply is being written: your message will queue behind it.",
        None => "Enter sends · Shift+Enter adds a line",
    };
    view! {
        <form class="composer" on:submit=move |ev| { ev.prevent_default(); send(); }>
            <label class="sr-only" for="composer-input">"Message"</label>
            <textarea id="composer-input" rows="3" placeholder="Write a message…"
                prop:value=text
                disabled=move || reason().is_some()
                on:input=move |ev| text.set(event_target_value(&ev))
                on:keydown=move |ev: leptos::ev::KeyboardEvent| {
                    if ev.key() == "Enter" && !ev.shift_key() && !ev.is_composing() {
                        ev.prevent_default();
                        send();
                    }
                }
            ></textarea>
            <div class="composer-foot">
                <span class="hint">{move || reason().map(str::to_string).unwrap_or_else(|| hint().to_string())}</span>
                // Stop in a place that never moves while a reply streams.
                {move || chat.running_run().map(|r| {
                    let id = r.id;
                    view! { <button type="button" class="stop" on:click=move |_| chat.stop_run(id.clone(), error)>"Stop"</button> }
                })}
                <button type="submit" disabled=move || reason().is_some() || text.with(|t| t.trim().is_empty())>"Send"</button>
            </div>
            <Show when=move || error.get().is_some()>
                <p class="error" role="alert">{move || error.get()}</p>
            </Show>
        </form>
    }
}
