//! A turn's timeline, folded under its reply until opened: who started the run, its Tier 1
//! attempts and their waits, its fallbacks and its tool calls, drawn as bars on the run's
//! time axis (plain HTML, positioned by percent; times relative to the run's start).
mod layout;

pub use layout::{layout, secs, started_by, took, Bar, Drawn, Row};

use super::state::Chat;
use crate::api;
use crate::client::fetch_json;
use crate::html::escape;
use crate::wire::{Message, RunDetail};
use leptos::prelude::*;

/// "Timeline", folded under an agent reply: nothing is read until it is opened; each
/// opening reads the run again (it may have gone on since).
#[component]
pub fn Timeline(message: RwSignal<Message>) -> impl IntoView {
    let chat = expect_context::<Chat>();
    let drawn = RwSignal::new(None::<Drawn>);
    let toggled = move |ev: leptos::ev::Event| {
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
                .session
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
    let body = move || drawn.with(|d| d.as_ref().map_or_else(|| LOADING.to_string(), html));
    // Every reply has its run from its first event: read once.
    message.with_untracked(|m| m.run_id.is_some()).then(|| {
        view! {
            <details class="timeline" on:toggle=toggled>
                <summary>"Timeline"</summary>
                <div inner_html=body></div>
            </details>
        }
    })
}

const LOADING: &str = "<p class=\"tl-head\">Loading…</p>";

/// The drawn run as HTML, every text in it escaped (an attempt's error is the provider's
/// words). One string, not a view per row: row views cost the browser bundle far more.
pub fn html(d: &Drawn) -> String {
    let mut h = String::with_capacity(256 + d.rows.len() * 256);
    h.push_str("<p class=\"tl-head\">");
    escape(&d.head, &mut h);
    h.push_str("</p><ol class=\"tl-rows\">");
    for r in &d.rows {
        h.push_str("<li class=\"");
        h.push_str(r.class);
        h.push_str("\"><span class=\"tl-at\">");
        escape(&r.at, &mut h);
        h.push_str("</span><span class=\"tl-track\">");
        for b in r.bar.iter().chain(&r.wait) {
            h.push_str("<span class=\"");
            h.push_str(b.class);
            h.push_str("\" style=\"");
            h.push_str(&b.style());
            h.push_str("\"></span>");
        }
        h.push_str("</span><span class=\"tl-text\"");
        if let Some(t) = &r.title {
            h.push_str(" title=\"");
            escape(t, &mut h);
            h.push('"');
        }
        h.push('>');
        escape(&r.text, &mut h);
        h.push_str("</span></li>");
    }
    h.push_str("</ol>");
    h
}

#[cfg(test)]
mod tests;
