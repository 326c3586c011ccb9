//! One message of the chat: an operator prompt (with its run's state) or an agent reply
//! (streaming, complete, failed with its classification, or stopped).
use super::chat::Chat;
use crate::client::{api, fetch_json, ClientError};
use crate::wire::{Message, MessageStatus, Receipt, Role, Run, RunKind, RunStatus};
use leptos::prelude::*;

#[component]
pub fn MessageView(message: RwSignal<Message>) -> impl IntoView {
    let chat = expect_context::<Chat>();
    let role = move || message.with(|m| m.role);
    let class = move || {
        message.with(|m| {
            let role = if m.role == Role::Operator {
                "operator"
            } else {
                "agent"
            };
            let status = match m.status {
                Some(MessageStatus::Streaming) => " streaming",
                Some(MessageStatus::Failed) => " failed",
                Some(MessageStatus::Cancelled) => " cancelled",
                _ => "",
            };
            let folded = if m.superseded { " superseded" } else { "" };
            format!("msg {role}{status}{folded}")
        })
    };
    // The operator prompt's latest run, for "queued"/"held" tags.
    let prompt_run = move || {
        let id = message.with(|m| m.id.clone());
        chat.runs
            .with(|rs| rs.iter().rev().find(|r| r.anchor_message_id == id).cloned())
    };
    let shown = move || !message.with(|m| m.superseded) || chat.show_superseded.get();
    view! {
        <Show when=shown>
        <li class=class data-role=move || if role() == Role::Operator { "operator" } else { "agent" }>
            <div class="who">
                {move || if role() == Role::Operator { "You" } else { "Agent" }}
                {move || (role() == Role::Operator).then(|| prompt_run().and_then(|r| run_tag(chat, &r)))}
            </div>
            <div class="content">{move || message.with(|m| m.content.clone())}</div>
            {move || (role() == Role::Agent).then(|| view! { <ReplyState message/> })}
        </li>
        </Show>
    }
}

fn run_tag(chat: Chat, r: &Run) -> Option<AnyView> {
    match r.status {
        RunStatus::Queued if r.held_by.is_some() => {
            let release = move |_| {
                let Some(sid) = chat.session_id() else {
                    return;
                };
                leptos::task::spawn_local(async move {
                    let url = api(&format!("/sessions/{sid}/release"));
                    if let Err(e) =
                        fetch_json::<serde::de::IgnoredAny>("POST", &url, Some("{}".into())).await
                    {
                        chat.error.set(Some(e.explain()));
                    }
                });
            };
            Some(
                view! {
                    <span class="tag held">"held behind a failed turn"</span>
                    <button class="secondary" on:click=release>"Run them now"</button>
                }
                .into_any(),
            )
        }
        RunStatus::Queued => Some(view! { <span class="tag queued">"queued"</span> }.into_any()),
        _ => None,
    }
}

#[component]
fn ReplyState(message: RwSignal<Message>) -> impl IntoView {
    let chat = expect_context::<Chat>();
    let stop_error = RwSignal::new(None::<String>);
    let stop = move |_| {
        let Some(run_id) = message.with_untracked(|m| m.run_id.clone()) else {
            return;
        };
        let Some(sid) = chat.session_id() else {
            return;
        };
        leptos::task::spawn_local(async move {
            let url = api(&format!("/sessions/{sid}/runs/{run_id}/cancel"));
            let res: Result<Run, ClientError> = fetch_json("POST", &url, Some("{}".into())).await;
            match res {
                Ok(run) => chat.apply(crate::wire::Event::Run(run)),
                Err(e) => stop_error.set(Some(e.explain())),
            }
        });
    };
    let regenerate = move |_| {
        let Some(run_id) = message.with_untracked(|m| m.run_id.clone()) else {
            return;
        };
        let Some(sid) = chat.session_id() else {
            return;
        };
        let anchor = chat.runs.with_untracked(|rs| {
            rs.iter()
                .find(|r| r.id == run_id)
                .map(|r| r.anchor_message_id.clone())
        });
        let Some(anchor) = anchor else { return };
        leptos::task::spawn_local(async move {
            let url = api(&format!("/sessions/{sid}/messages/{anchor}/regenerate"));
            if let Err(e) = fetch_json::<Receipt>("POST", &url, Some("{}".into())).await {
                stop_error.set(Some(e.explain()));
            }
        });
    };
    move || {
        let m = message.get();
        match m.status {
            Some(MessageStatus::Streaming) => view! {
                <div class="reply-state">
                    <span class="typing" aria-label="writing">"▍"</span>
                    {move || tier1_wait(&chat, message.with(|m| m.run_id.clone()))}
                    <button class="stop" on:click=stop>"Stop"</button>
                    <span class="error">{move || stop_error.get()}</span>
                </div>
            }
            .into_any(),
            Some(MessageStatus::Failed) => {
                let class = m
                    .retry
                    .as_ref()
                    .map(|r| r.retry_class.clone())
                    .unwrap_or_else(|| "unknown".into());
                let retryable = m.retry.as_ref().is_some_and(|r| r.retryable);
                view! {
                    <div class="reply-state failure" role="status">
                        <strong>"This reply failed"</strong>
                        <span class="class">{class}</span>
                        <span class="retryable">{if retryable { "retryable" } else { "not retryable" }}</span>
                        <p>{m.error_message.clone().unwrap_or_default()}</p>
                        <button class="secondary" on:click=regenerate>"Regenerate"</button>
                    </div>
                }
                .into_any()
            }
            Some(MessageStatus::Cancelled) => view! {
                <div class="reply-state">
                    <span class="tag">"Stopped"</span>
                    <button class="secondary" on:click=regenerate>"Regenerate"</button>
                </div>
            }
            .into_any(),
            _ => view! {
                <div class="reply-state">
                    {provenance_tag(&chat, &m)}
                    <button class="secondary" on:click=regenerate>"Regenerate"</button>
                </div>
            }
            .into_any(),
        }
    }
}

/// "Provider busy — attempt 2 of 3 in 4 s" while Tier 1 waits before this run's next attempt.
fn tier1_wait(chat: &Chat, run_id: Option<String>) -> Option<String> {
    let a = chat.attempt.get()?;
    if Some(&a.run_id) != run_id.as_ref() {
        return None;
    }
    let of = chat
        .config
        .with(|c| c.as_ref().map(|c| c.tier1_max_attempts))
        .unwrap_or(0);
    let secs = (a.retry_in_ms + 999) / 1000;
    Some(if of > 0 {
        format!("Provider busy — attempt {} of {of} in {secs} s", a.n)
    } else {
        format!("Provider busy — attempt {} in {secs} s", a.n)
    })
}

/// Marks a reply that a retry produced: resend, continuation or regenerate, with its attempt.
fn provenance_tag(chat: &Chat, m: &Message) -> Option<AnyView> {
    let p = m.provenance.as_ref()?;
    let kind = chat.runs.with_untracked(|rs| {
        rs.iter()
            .find(|r| Some(&r.id) == m.run_id.as_ref())
            .map(|r| r.kind)
    });
    let what = match kind {
        Some(RunKind::Resend) => "resent",
        Some(RunKind::Continuation) => "continued",
        Some(RunKind::Regenerate) => "regenerated",
        _ => "retried",
    };
    let label = match p.attempt {
        Some(n) => format!("{what} (attempt {n})"),
        None => what.to_string(),
    };
    Some(view! { <span class="tag">{label}</span> }.into_any())
}
