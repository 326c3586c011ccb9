//! An agent reply's text and tool calls in order; each call with its tool, arguments, a live
//! status and its result (always text nodes: tool output is never read as HTML); a call that
//! waits for the operator shows its card ([`super::approval`]), a decided one its decision.
use crate::clock::{at, at_utc, now_ms};
use crate::wire::{Message, Millis, Part, ToolCall, ToolCallStatus};
use leptos::prelude::*;
use serde_json::Value;
use std::time::Duration;

/// A result longer than this many characters shows cut, with a button for the rest.
const SHOWN_CHARS: usize = 2000;

/// The reply's parts before its streaming tail. A delta changes only the tail (the text after
/// the last part), so these nodes stay as they are while text streams. Each part reads the
/// message in place: nothing is cloned or compared per delta beyond what changed.
pub fn parts_view(message: RwSignal<Message>) -> impl IntoView {
    // Keyed by position and call id: a call seen again updates in place.
    let keys = Memo::new(move |_| {
        message.with(|m| {
            m.parts
                .iter()
                .flatten()
                .enumerate()
                .map(|(i, p)| match p {
                    Part::ToolCall { call } => (i, Some(call.id.clone())),
                    Part::Text { .. } => (i, None),
                })
                .collect::<Vec<_>>()
        })
    });
    view! {
        <For each=move || keys.get() key=|k| k.clone() let:k>
            {match k {
                (i, None) => super::prose::markdown(move |f: &mut dyn FnMut(&str)| {
                    message.with(|m| match m.parts.as_ref().and_then(|p| p.get(i)) {
                        Some(Part::Text { text }) => f(text),
                        _ => f(""),
                    })
                })
                .into_any(),
                (i, Some(_)) => view! { <ToolCallView message i/> }.into_any(),
            }}
        </For>
    }
}

fn call_at(m: &Message, i: usize) -> Option<&ToolCall> {
    match m.parts.as_ref()?.get(i)? {
        Part::ToolCall { call } => Some(call),
        Part::Text { .. } => None,
    }
}

/// Tool call `i` of the message's parts.
#[component]
fn ToolCallView(message: RwSignal<Message>, i: usize) -> impl IntoView {
    // Which tool, where and with what never change for one call id.
    let (tool, server, args, started) = message.with_untracked(|m| {
        call_at(m, i)
            .map(|c| {
                let mut args = String::new();
                json(&c.arguments, 0, &mut args);
                (c.tool.clone(), c.server.clone(), args, c.started_at)
            })
            .unwrap_or_default()
    });
    let status = Memo::new(move |_| {
        message.with(|m| call_at(m, i).map_or(ToolCallStatus::Running, |c| c.status))
    });
    let finished = Memo::new(move |_| message.with(|m| call_at(m, i).and_then(|c| c.finished_at)));
    // Compared in place on each delta; copied only when it changed.
    let result = Memo::new_owning(move |old: Option<Option<String>>| {
        message.with(|m| {
            let now = call_at(m, i).and_then(|c| c.result.as_deref());
            match old {
                Some(old) if old.as_deref() == now => (old, false),
                _ => (now.map(str::to_string), true),
            }
        })
    });
    // A clock that ticks only while the call runs.
    let now = RwSignal::new(now_ms());
    Effect::new(move |_| {
        if status.get() == ToolCallStatus::Running {
            now.set(now_ms());
            if let Ok(h) = set_interval(move || now.set(now_ms()), Duration::from_millis(1000)) {
                on_cleanup(move || h.clear());
            }
        }
    });
    let time = move || match (status.get(), finished.get()) {
        (ToolCallStatus::Running, _) => seconds(now.get().saturating_sub(started), false),
        (_, Some(end)) => seconds(end.saturating_sub(started), true),
        (_, None) => String::new(),
    };
    // Asked and undecided: the card with the operator's buttons shows.
    let waiting =
        Memo::new(move |_| message.with(|m| call_at(m, i).is_some_and(ToolCall::is_waiting)));
    let label = move || status_words(status.get(), waiting.get());
    let full = RwSignal::new(false);
    let result = move || {
        let text = result.get()?;
        let failed = status.get_untracked() == ToolCallStatus::Error;
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
    // The decision, once made (who, from where, when); its request's state outlives the card.
    let decided =
        Memo::new(move |_| message.with(|m| call_at(m, i).and_then(|c| c.approval.clone())));
    let hydrated = super::use_hydrated();
    let decided = move || {
        let a = decided.get()?;
        let tab = crate::client::tab_id();
        let when = |ms| if hydrated.get() { at(ms) } else { at_utc(ms) };
        let line = super::approval::decided_line(&a, tab.as_deref(), when)?;
        let class = match a.decision {
            Some(d) if d.allows() => "approval-decided allowed",
            _ => "approval-decided denied",
        };
        Some(view! { <p class=class>{line}</p> })
    };
    let busy = RwSignal::new(false);
    let error = RwSignal::new(None::<String>);
    let card = {
        let args = args.clone();
        move || {
            waiting.get().then(|| {
                let args = args.clone();
                view! { <super::approval::ApprovalCard message i args busy error/> }
            })
        }
    };
    let args = move || {
        (!waiting.get()).then(|| {
            view! {
                <details class="tool-args">
                    <summary>"Arguments"</summary>
                    <pre>{args.clone()}</pre>
                </details>
            }
        })
    };
    let name = tool.clone();
    view! {
        <div class="tool-call" data-status=move || status.get().as_str() data-tool=name
            data-waiting=move || waiting.get().to_string()>
            <div class="tool-head">
                <span class="tool-icon" aria-hidden="true">"⚙"</span>
                <span class="tool-name">{tool}</span>
                <span class="tool-server">{server}</span>
                <span class="tool-status">{label}</span>
                <span class="tool-time">{time}</span>
            </div>
            {card}
            {decided}
            <Show when=move || error.get().is_some()>
                <p class="error approval-error" role="alert">{move || error.get()}</p>
            </Show>
            {args}
            {result}
        </div>
    }
}

/// A call's status in words; `waiting`: asked and undecided.
fn status_words(status: ToolCallStatus, waiting: bool) -> &'static str {
    match status {
        ToolCallStatus::Interrupted => "interrupted: outcome unknown",
        ToolCallStatus::AwaitingApproval if waiting => "waiting for your approval",
        ToolCallStatus::AwaitingApproval => "decided: about to run",
        ToolCallStatus::Denied => "denied: not run",
        ToolCallStatus::Queued => "queued: waits for the other calls of this step",
        s => s.as_str(),
    }
}

/// Writes `v` as indented JSON. Written here, not with serde_json's pretty printer, which
/// costs the browser bundle a serializer and a float formatter; nesting past 32 shows "…".
fn json(v: &Value, depth: usize, out: &mut String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => number(n, out),
        Value::String(s) => quote(s, out),
        _ if depth >= 32 => out.push('…'),
        Value::Array(a) if a.is_empty() => out.push_str("[]"),
        Value::Object(o) if o.is_empty() => out.push_str("{}"),
        Value::Array(a) => {
            out.push('[');
            for (k, x) in a.iter().enumerate() {
                item(k, depth + 1, out);
                json(x, depth + 1, out);
            }
            indent(depth, out);
            out.push(']');
        }
        Value::Object(o) => {
            out.push('{');
            for (k, (key, x)) in o.iter().enumerate() {
                item(k, depth + 1, out);
                quote(key, out);
                out.push_str(": ");
                json(x, depth + 1, out);
            }
            indent(depth, out);
            out.push('}');
        }
    }
}

fn item(k: usize, depth: usize, out: &mut String) {
    if k > 0 {
        out.push(',');
    }
    indent(depth, out);
}

fn indent(depth: usize, out: &mut String) {
    out.push('\n');
    for _ in 0..depth {
        out.push_str("  ");
    }
}

fn number(n: &serde_json::Number, out: &mut String) {
    if let Some(i) = n.as_i64() {
        out.push_str(&i.to_string());
    } else if let Some(u) = n.as_u64() {
        out.push_str(&u.to_string());
    } else {
        // The browser formats floats: Rust's float formatting is large in wasm.
        #[cfg(feature = "hydrate")]
        out.push_str(
            &js_sys::Number::from(n.as_f64().unwrap_or_default())
                .to_string_with_radix(10)
                .map(String::from)
                .unwrap_or_default(),
        );
        #[cfg(not(feature = "hydrate"))]
        out.push_str(&n.to_string());
    }
}

fn quote(s: &str, out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                out.push_str("\\u00");
                out.push(char::from(HEX[(c as usize) >> 4]));
                out.push(char::from(HEX[(c as usize) & 15]));
            }
            c => out.push(c),
        }
    }
    out.push('"');
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
    use super::{json, seconds};

    #[test]
    fn durations_read_as_words() {
        assert_eq!(seconds(420, true), "0.4 s");
        assert_eq!(seconds(420, false), "0 s");
        assert_eq!(seconds(12_900, true), "12 s");
        assert_eq!(seconds(125_000, true), "2 min 5 s");
        assert_eq!(seconds(-5, false), "0 s");
    }

    #[test]
    fn arguments_read_as_indented_json() {
        let v = serde_json::json!({"path": "a\"b\n\u{1}", "n": [1, -2, 2.5], "o": {}, "t": true});
        let mut out = String::new();
        json(&v, 0, &mut out);
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&out).unwrap(),
            v,
            "valid JSON: {out}"
        );
        assert!(
            out.contains("\n  \"n\": [\n    1,\n    -2,\n    2.5\n  ]"),
            "{out}"
        );
        let mut out = String::new();
        json(&serde_json::json!({}), 0, &mut out);
        assert_eq!(out, "{}");
    }
}
