//! A turn's timeline, folded under its reply until opened: who started the run, its Tier 1
//! attempts and their waits, its fallbacks and its tool calls, drawn as bars on the run's
//! time axis (views positioned by percent; times relative to the run's start).
mod layout;

pub use layout::{layout, secs, started_by, took, Bar, Drawn, Row};

use super::state::Chat;
use crate::api;
use crate::client::fetch_json;
use crate::wire::{Message, RunDetail};
use leptos::prelude::*;

/// "Timeline", folded under an agent reply: nothing is read until it is opened; each
/// opening reads the run again (it may have gone on since).
#[component]
pub fn Timeline(message: RwSignal<Message>) -> impl IntoView {
    let chat = expect_context::<Chat>();
    let drawn = RwSignal::new(None::<Drawn>);
    let toggled = move |ev: leptos::web_sys::ToggleEvent| {
        let open = event_target::<leptos::web_sys::HtmlDetailsElement>(&ev).open();
        let Some(rid) = message
            .with_untracked(|m| m.run_id.clone())
            .filter(|_| open)
        else {
            return;
        };
        leptos::task::spawn_local(async move {
            let url = api::RUN.url(&[rid.as_str()]);
            let answer = fetch_json::<RunDetail>(api::RUN.method(), &url, None).await;
            let auto_retry = chat
                .session()
                .with_untracked(|s| s.as_ref().map(|s| s.auto_retry).unwrap_or_default());
            drawn.set(Some(match answer {
                Ok(d) => layout(
                    &d,
                    auto_retry,
                    crate::client::tab_id().as_deref(),
                    crate::clock::now_ms(),
                ),
                Err(e) => Drawn {
                    head: format!("Could not read the run: {}", e.explain()),
                    rows: Vec::new(),
                },
            }));
        });
    };
    let body = move || match drawn.get() {
        Some(d) => rows(d).into_any(),
        None => view! { <p class="tl-head">"Loading…"</p> }.into_any(),
    };
    // Every reply has its run from its first event: read once.
    message.with_untracked(|m| m.run_id.is_some()).then(|| {
        view! {
            <details class="timeline" on:toggle=toggled>
                <summary>"Timeline"</summary>
                <div>{body}</div>
            </details>
        }
    })
}

/// The drawn run as views: its head, then a row per attempt, fallback and tool call, with
/// its bars (Leptos escapes every text: an attempt's error is the provider's words).
pub fn rows(d: Drawn) -> impl IntoView {
    let rows = d
        .rows
        .into_iter()
        .map(|r| {
            let bars = r
                .bar
                .iter()
                .chain(&r.wait)
                .map(|b| view! { <span class=b.class style=b.style()></span> })
                .collect_view();
            view! {
                <li class=r.class>
                    <span class="tl-at">{r.at}</span>
                    <span class="tl-track">{bars}</span>
                    <span class="tl-text" title=r.title>{r.text}</span>
                </li>
            }
        })
        .collect_view();
    view! {
        <p class="tl-head">{d.head}</p>
        <ol class="tl-rows">{rows}</ol>
    }
}

#[cfg(test)]
mod tests;
