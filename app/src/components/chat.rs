//! The chat view of one session: loads a snapshot, then follows the session's events
//! (messages, deltas, runs) live; holds the composer.
use super::composer::Composer;
use super::reply::MessageView;
use super::retry_banner::RetryBanner;
use super::state::Chat;
use crate::api;
use crate::client::{fetch_json, PageLocal, SessionFeed};
use crate::page_data::{first_config, snapshot_url, take_session};
use crate::wire::{AutoRetry, ClientConfig, Session, SessionDetail, SessionId};
use leptos::prelude::*;

/// The chat of the session `sid` names (the route's id: moving to another session changes
/// it, and the view follows).
#[component]
pub fn SessionView(sid: Memo<SessionId>) -> impl IntoView {
    let chat = Chat::new();
    provide_context(chat);
    provide_context(chat.retrier);
    // Tier 2's schedule before Tier 2 hears of the last turn: from the page, else read.
    match first_config() {
        Some(c) => {
            chat.retrier.configure(&c);
            chat.config.set(Some(c));
        }
        None => {
            Effect::new(move |_| {
                leptos::task::spawn_local(async move {
                    let url = api::CONFIG.url(&[]);
                    let method = api::CONFIG.method();
                    if let Ok(c) = fetch_json::<ClientConfig>(method, &url, None).await {
                        chat.retrier.configure(&c);
                        chat.config.set(Some(c));
                    }
                });
            });
        }
    }
    // The first snapshot is in the page the server rendered; any other (moving to another
    // session, or a page without it) is read over the API into the same view.
    let first_id = sid.get_untracked();
    let first = match take_session(&first_id) {
        Some(Ok(detail)) => {
            let after = detail.last_event_id;
            chat.show(detail);
            Some(after)
        }
        Some(Err(e)) => {
            chat.error.set(Some(e));
            None
        }
        None => None,
    };
    follow(chat, sid, first_id, first);
    // The tab is titled after the open session while it is open (`App` draws the title):
    // from the first snapshot at once, so the server writes it too, then as it changes.
    if let Some(a) = super::approvals::use_approvals() {
        let title = move || chat.session().with(|s| s.as_ref().map(|s| s.title.clone()));
        a.set_title(untrack(title));
        Effect::new(move |_| a.set_title(title()));
        on_cleanup(move || a.set_title(None));
    }
    view! { <ChatBody sid/> }
}

/// How the open session reaches the page, in the browser: from the first snapshot (`first`:
/// its last event id) for `first_id`, else from a snapshot read over the API; then its events
/// as they come (from the snapshot's last event id, so none is missed or applied twice), with
/// Tier 2 told of its last turn. Leaving a session closes its stream and stands its Tier 2
/// down at once.
fn follow(chat: Chat, sid: Memo<SessionId>, first_id: SessionId, first: Option<i64>) {
    let stream = StoredValue::<_, PageLocal>::new_with_storage(None::<SessionFeed>);
    // The first snapshot, until the chat leaves it for another session's.
    let first = StoredValue::new(first);
    let open = move |id: &SessionId, after: i64| {
        chat.restore_tier2();
        stream.set_value(Some(SessionFeed::open(id, after, move |_, ev| {
            chat.apply(ev)
        })));
    };
    Effect::new(move |_| {
        let id = sid.get();
        stream.set_value(None);
        chat.retrier.reset(&id);
        chat.notice.set(None);
        if let Some(after) = first.get_value().filter(|_| id == first_id) {
            open(&id, after);
            return;
        }
        first.set_value(None);
        chat.set_session(None);
        chat.messages.set(Vec::new());
        chat.set_runs(Vec::new());
        chat.error.set(None);
        leptos::task::spawn_local(async move {
            let url = snapshot_url(&id);
            let loaded = fetch_json::<SessionDetail>(api::SESSION.method(), &url, None);
            match loaded.await {
                // Only if the operator is still on it.
                Ok(d) if sid.get_untracked() == id => {
                    let after = d.last_event_id;
                    chat.show(d);
                    open(&id, after);
                }
                Ok(_) => {}
                Err(e) => chat.error.set(Some(e.explain())),
            }
        });
    });
    on_cleanup(move || stream.set_value(None));
}

/// The open session: its header, its conversation and the dock (banner and composer).
#[component]
fn ChatBody(sid: Memo<SessionId>) -> impl IntoView {
    let chat = expect_context::<Chat>();
    let scroller = NodeRef::<leptos::html::Div>::new();
    let list = NodeRef::<leptos::html::Div>::new();
    let parts = Memo::new(move |_| chat.messages.with(|ms| ms.len().div_ceil(PART)));
    follow_the_bottom(sid, list, scroller);
    // A memo: the header is not rebuilt on every delta.
    let superseded = Memo::new(move |_| chat.superseded_replies());
    let notice = move || {
        chat.notice.get().or_else(|| {
            chat.retrier
                .stale
                .get()
                .then(|| "Already retried in another tab — following the new run.".to_string())
        })
    };

    view! {
        <section class="chat" aria-label="Chat">
            <header class="chat-head">
                <h1>{move || chat.session().get().map(|s| s.title).unwrap_or_else(|| "Loading…".into())}</h1>
                <span class="model" title=move || chat.session().get().map(|s| s.model)>{move || chat.session().get().map(|s| s.model)}</span>
                <AutoRetrySetting/>
                <super::approval_mode::ApprovalSetting/>
                {move || {
                    let n = superseded.get();
                    (n > 0).then(|| {
                        let label = move || match (chat.show_superseded.get(), n) {
                            (true, _) => "Hide earlier attempts".to_string(),
                            (false, 1) => "1 earlier attempt".to_string(),
                            (false, n) => format!("{n} earlier attempts"),
                        };
                        view! {
                            <button class="secondary fold" aria-pressed=move || chat.show_superseded.get().to_string()
                                on:click=move |_| chat.show_superseded.update(|v| *v = !*v)>{label}</button>
                        }
                    })
                }}
            </header>
            <Show when=move || chat.error.get().is_some()>
                <p class="error" role="alert">{move || chat.error.get()}</p>
            </Show>
            <div class="scroller" node_ref=scroller>
                <div class="messages" role="log" aria-label="Conversation" node_ref=list>
                    <For each=move || 0..parts.get() key=|i| *i let:i>
                        <MessagePart place=i/>
                    </For>
                </div>
                <Show when=move || chat.session().get().is_some() && chat.messages.with(|m| m.is_empty())>
                    <p class="empty">"Send the first message below."</p>
                </Show>
            </div>
            // Docked under the conversation, always in view: the retry banner and the composer.
            <div class="dock">
                <Show when=move || notice().is_some()>
                    <p class="notice" role="status">{notice}</p>
                </Show>
                <RetryBanner/>
                <Composer session_id=sid/>
            </div>
        </section>
    }
}

/// How many messages a [`MessagePart`] holds.
const PART: usize = 32;

/// The session's messages from `place * PART`, [`PART`] of them at most, in a list of their
/// own: when the last reply grows, the browser lays out and paints the conversation's parts
/// (`contain: content`), not each of its messages. Parts are cut by a message's place in the
/// session, so the server's page and the hydrated one agree.
#[component]
fn MessagePart(place: usize) -> impl IntoView {
    let chat = expect_context::<Chat>();
    let first = place.saturating_mul(PART);
    // A memo: a message added to a later part (or a delta anywhere) does not wake this one.
    let messages = Memo::new(move |_| {
        chat.messages.with(|ms| {
            ms.iter()
                .skip(first)
                .take(PART)
                .map(|(id, m)| (id.clone(), *m))
                .collect::<Vec<_>>()
        })
    });
    view! {
        <ol class="part">
            <For each=move || messages.get() key=|(id, _)| id.clone() let:item>
                <MessageView message=item.1/>
            </For>
        </ol>
    }
}

/// The session's `auto_retry` setting: retry in this tab, on the server, or not at all.
#[component]
fn AutoRetrySetting() -> impl IntoView {
    let chat = expect_context::<Chat>();
    let current = move || {
        chat.session()
            .with(|s| s.as_ref().map(|s| s.auto_retry).unwrap_or_default())
    };
    let change = move |ev: leptos::ev::Event| {
        let Some(value) = AutoRetry::parse(&event_target_value(&ev)) else {
            return;
        };
        let Some(sid) = chat.session_id() else {
            return;
        };
        leptos::task::spawn_local(async move {
            // `{"auto_retry":"…"}`, written out: `serde_json::Value` costs the browser bundle.
            let body = format!(r#"{{"auto_retry":"{}"}}"#, value.as_str());
            let url = api::PATCH_SESSION.url(&[sid.as_str()]);
            let method = api::PATCH_SESSION.method();
            match fetch_json::<Session>(method, &url, Some(body)).await {
                Ok(s) => {
                    chat.set_session(Some(s));
                    chat.refresh_session_state();
                }
                Err(e) => chat.error.set(Some(e.explain())),
            }
        });
    };
    view! {
        <label class="auto-retry" title="Who retries a failed turn: this tab, the server (keeps trying with the tab closed), or no one">
            "Auto retry "
            <select on:change=change prop:value=move || current().as_str()>
                <option value="browser">"in this tab"</option>
                <option value="background">"on the server"</option>
                <option value="off">"off"</option>
            </select>
        </label>
    }
}

/// Keeps the conversation scrolled to its end while it grows, unless the operator scrolled up
/// to read (more than [`FOLLOW_WITHIN`] px above where the end was).
///
/// Nothing runs per delta or per scroll: a `ResizeObserver` sees the list grow (or the pane
/// change size) after the browser laid out a frame, before it paints it, and decides there
/// by [`follows`], from where the view is and where the end was at its last call (a scroll
/// of the operator's in that same frame counts: it moved the view before the observer ran).
/// Another session opens at its end.
fn follow_the_bottom(
    sid: Memo<SessionId>,
    messages: NodeRef<leptos::html::Div>,
    scroller: NodeRef<leptos::html::Div>,
) {
    #[cfg(feature = "hydrate")]
    {
        use wasm_bindgen::{closure::Closure, JsCast};
        // The farthest the view could scroll at the observer's last call (none yet: follow).
        let end_was = StoredValue::new(None::<i32>);
        Effect::new(move |_| {
            sid.track();
            end_was.set_value(None);
        });
        let observer = StoredValue::new_local(None::<web_sys::ResizeObserver>);
        Effect::new(move |_| {
            let (Some(list), Some(pane)) = (messages.get(), scroller.get()) else {
                return;
            };
            let grown = Closure::<dyn FnMut()>::new(move || {
                let Some(el) = scroller.get_untracked() else {
                    return;
                };
                if follows(el.scroll_top(), end_was.get_value()) {
                    el.set_scroll_top(el.scroll_height());
                }
                end_was.set_value(Some(el.scroll_height() - el.client_height()));
            });
            let Ok(o) = web_sys::ResizeObserver::new(grown.into_js_value().unchecked_ref()) else {
                return;
            };
            o.observe(&list);
            o.observe(&pane);
            if let Some(old) = observer.try_update_value(|slot| slot.replace(o)).flatten() {
                old.disconnect();
            }
        });
        on_cleanup(move || {
            if let Some(o) = observer.try_update_value(Option::take).flatten() {
                o.disconnect();
            }
        });
    }
    #[cfg(not(feature = "hydrate"))]
    let _ = (sid, messages, scroller);
}

/// How far above the conversation's end (px) the view may be and still follow it.
#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
const FOLLOW_WITHIN: i32 = 80;

/// Whether the view at `top` follows the conversation to its new end, given the farthest
/// it could scroll before (`end_was`; none on the first look, which goes to the end).
#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
fn follows(top: i32, end_was: Option<i32>) -> bool {
    end_was.is_none_or(|end| top >= end.saturating_sub(FOLLOW_WITHIN))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{Message, MessageId};

    fn message(i: usize) -> Message {
        serde_json::from_value(serde_json::json!({
            "id": format!("m_{i}"), "role": if i.is_multiple_of(2) { "operator" } else { "agent" },
            "content": format!("message {i}"), "created_at": 1_000,
            "session_id": "s_1", "superseded": false,
        }))
        .expect("a message")
    }

    /// The view follows the end from where the page put it (or near it), and stays where
    /// the operator scrolled up to; the first look goes to the end.
    #[test]
    fn the_view_follows_the_end_unless_scrolled_up() {
        assert!(follows(0, None));
        assert!(follows(1200, Some(1200)));
        assert!(follows(1200 - FOLLOW_WITHIN, Some(1200)));
        assert!(!follows(1200 - FOLLOW_WITHIN - 1, Some(1200)));
        assert!(!follows(0, Some(1200)));
        // A pane that grew (or a list that shrank) leaves the view past the end it had.
        assert!(follows(1300, Some(1200)));
        assert!(follows(i32::MIN, Some(i32::MIN)));
    }

    /// A session's messages are drawn in lists of [`PART`], cut by their place: the server's
    /// page and the hydrated one hold the same parts.
    #[test]
    fn messages_come_in_parts() {
        let owner = Owner::new();
        let html = owner.with(|| {
            let chat = Chat::new();
            provide_context(chat);
            chat.messages.set(
                (0..PART + 5)
                    .map(|i| (MessageId::new(format!("m_{i}")), RwSignal::new(message(i))))
                    .collect(),
            );
            view! { <MessagePart place=0/><MessagePart place=1/> }.to_html()
        });
        let parts: Vec<&str> = html.split(r#"<ol class="part">"#).skip(1).collect();
        assert_eq!(parts.len(), 2, "{html}");
        assert_eq!(parts[0].matches("<li").count(), PART, "{html}");
        assert_eq!(parts[1].matches("<li").count(), 5, "{html}");
        assert!(parts[0].contains("message 31") && !parts[0].contains("message 32"));
        assert!(parts[1].contains("message 32") && parts[1].contains("message 36"));
    }
}
