//! An agent reply's text and tool calls in order; each call with its tool, arguments, a live
//! status and its result (always text nodes: tool output is never read as HTML).
use crate::clock::now_ms;
use crate::wire::{Message, Millis, Part, ToolCall, ToolCallStatus};
use leptos::prelude::*;
use std::time::Duration;

/// A result longer than this many characters shows cut, with a button for the rest.
const SHOWN_CHARS: usize = 2000;

/// The reply's parts before its streaming tail. A delta changes only the tail (the text after
/// the last part), so these nodes stay as they are while text streams.
pub fn parts_view(message: RwSignal<Message>) -> impl IntoView {
    // Compared in place, not cloned, on every delta; cloned only when a part changed.
    let parts = Memo::new_owning(move |old: Option<Vec<Part>>| {
        message.with(|m| {
            let now = m.parts.as_deref().unwrap_or_default();
            match old {
                Some(old) if old.as_slice() == now => (old, false),
                _ => (now.to_vec(), true),
            }
        })
    });
    // Keyed by position and call id: a call seen again updates in place.
    let keys = move || {
        parts.with(|ps| {
            ps.iter()
                .enumerate()
                .map(|(i, p)| match p {
                    Part::ToolCall { call } => (i, Some(call.id.clone())),
                    Part::Text { .. } => (i, None),
                })
                .collect::<Vec<_>>()
        })
    };
    view! {
        <For each=keys key=|k| k.clone() let:k>
            {match k {
                (i, None) => (move || parts.with(|ps| match ps.get(i) {
                    Some(Part::Text { text }) => text.clone(),
                    _ => String::new(),
                }))
                .into_any(),
                (i, Some(_)) => {
                    let call = Memo::new(move |_| parts.with(|ps| match ps.get(i) {
                        Some(Part::ToolCall { call }) => Some(call.clone()),
                        _ => None,
                    }));
                    view! { <ToolCallView call/> }.into_any()
                }
            }}
        </For>
    }
}

#[component]
fn ToolCallView(call: Memo<Option<ToolCall>>) -> impl IntoView {
    // Which tool, where and with what never change for one call id.
    let (tool, server, args, started) = call.with_untracked(|c| {
        c.as_ref()
            .map(|c| {
                (
                    c.tool.clone(),
                    c.server.clone(),
                    serde_json::to_string_pretty(&c.arguments).unwrap_or_default(),
                    c.started_at,
                )
            })
            .unwrap_or_default()
    });
    let status =
        Memo::new(move |_| call.with(|c| c.as_ref().map_or(ToolCallStatus::Running, |c| c.status)));
    let finished = Memo::new(move |_| call.with(|c| c.as_ref().and_then(|c| c.finished_at)));
    // A clock that ticks only while the call runs.
    let now = RwSignal::new(now_ms());
    Effect::new(move |_| {
        if status.get() == ToolCallStatus::Running {
            now.set(now_ms());
            if let Ok(h) =
                set_interval_with_handle(move || now.set(now_ms()), Duration::from_millis(1000))
            {
                on_cleanup(move || h.clear());
            }
        }
    });
    let time = move || match (status.get(), finished.get()) {
        (ToolCallStatus::Running, _) => seconds(now.get().saturating_sub(started), false),
        (_, Some(end)) => seconds(end.saturating_sub(started), true),
        (_, None) => String::new(),
    };
    let label = move || match status.get() {
        ToolCallStatus::Interrupted => "interrupted: outcome unknown",
        s => s.as_str(),
    };
    let full = RwSignal::new(false);
    let result = move || {
        let (text, failed) = call.with(|c| {
            c.as_ref()
                .and_then(|c| Some((c.result.clone()?, c.status == ToolCallStatus::Error)))
        })?;
        let cut = text
            .char_indices()
            .nth(SHOWN_CHARS)
            .map(|(at, _)| text[..at].to_string());
        let chars = text.chars().count();
        let summary = format!(
            "{} ({chars} character{})",
            if failed { "Error" } else { "Result" },
            if chars == 1 { "" } else { "s" }
        );
        let long = cut.is_some();
        Some(view! {
            <details class="tool-result" open=failed>
                <summary>{summary}</summary>
                <pre>{move || match (&cut, full.get()) {
                    (Some(cut), false) => format!("{cut}…"),
                    _ => text.clone(),
                }}</pre>
                <Show when=move || long && !full.get()>
                    <button class="secondary show-all" on:click=move |_| full.set(true)>"Show all"</button>
                </Show>
            </details>
        })
    };
    let name = tool.clone();
    view! {
        <div class="tool-call" data-status=move || status.get().as_str() data-tool=name>
            <div class="tool-head">
                <span class="tool-icon" aria-hidden="true">"⚙"</span>
                <span class="tool-name">{tool}</span>
                <span class="tool-server">{server}</span>
                <span class="tool-status">{label}</span>
                <span class="tool-time">{time}</span>
            </div>
            <details class="tool-args">
                <summary>"Arguments"</summary>
                <pre>{args}</pre>
            </details>
            {result}
        </div>
    }
}

/// "3 s" while running; "0.4 s", "12 s" or "2 min 5 s" once done.
fn seconds(ms: Millis, tenths: bool) -> String {
    let ms = ms.max(0);
    let s = ms / 1000;
    if s >= 120 {
        format!("{} min {} s", s / 60, s % 60)
    } else if tenths && s < 10 {
        format!("{s}.{} s", ms % 1000 / 100)
    } else {
        format!("{s} s")
    }
}

#[cfg(test)]
mod tests {
    use super::seconds;

    #[test]
    fn durations_read_as_words() {
        assert_eq!(seconds(420, true), "0.4 s");
        assert_eq!(seconds(420, false), "0 s");
        assert_eq!(seconds(12_900, true), "12 s");
        assert_eq!(seconds(125_000, true), "2 min 5 s");
        assert_eq!(seconds(-5, false), "0 s");
    }
}
