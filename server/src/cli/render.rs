//! How the client commands print: one human line per answer, the session, tool and model
//! tables, and the API's JSON on one line for `--json` (a run's timeline: [`super::timeline`]).
use app::clock::{clock_text, relative, utc};
use app::wire::{
    Decision, Millis, ModelInfo, ModelList, RunId, Session, SessionId, ToolCall, ToolCallStatus,
    ToolServer,
};
use serde_json::Value;
use std::borrow::Cow;
use std::fmt::Write as _;

/// Untrusted text (model output, titles, errors, tool results and names, anything a server
/// answered) made safe for a terminal: every control character but newline and tab shown
/// escaped (`\x1b`; C1 controls as `\u{9b}`), so no text can move the cursor, erase a line,
/// set the clipboard or hide a link (CONTRACT §4); and the bidirectional overrides and
/// isolates (`\u{202e}`), so no text reads in another order than the one that runs. Printable text is left as it is, so this
/// is idempotent.
pub fn untrusted(text: &str) -> Cow<'_, str> {
    let unsafe_char = |c: char| (c.is_control() && c != '\n' && c != '\t') || bidi_control(c);
    if !text.chars().any(unsafe_char) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            c if !unsafe_char(c) => out.push(c),
            c if (c as u32) < 0x80 => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
        }
    }
    Cow::Owned(out)
}

/// The embeddings, overrides and isolates of Unicode's bidirectional algorithm (U+202A–202E,
/// U+2066–2069): printed, they reorder the text after them ("Trojan Source").
fn bidi_control(c: char) -> bool {
    matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// The answer as the server sent it, on one line (JSON strings never hold a raw newline).
pub fn one_line(raw: &str) -> String {
    raw.trim().replace(['\n', '\r'], "")
}

pub fn started(queued: bool) -> &'static str {
    if queued {
        "queued"
    } else {
        "started"
    }
}

pub fn to_wire<T: serde::Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => "?".into(),
    }
}

/// id, title, model, status, last run (status and retry class).
pub fn sessions_table(sessions: &[Session]) -> String {
    if sessions.is_empty() {
        return "no sessions".into();
    }
    let mut rows =
        vec![["ID", "TITLE", "MODEL", "STATUS", "LAST RUN", "AUTO RETRY"].map(String::from)];
    let now = server::clock::now_ms();
    for s in sessions {
        let title: String = if s.title.chars().count() > 40 {
            s.title.chars().take(39).chain(['…']).collect()
        } else {
            s.title.clone()
        };
        let last = match &s.last_run {
            None => "-".to_string(),
            Some(r) => match &r.retry {
                Some(c) => format!("{} ({})", to_wire(&r.status), c.retry_class),
                None => to_wire(&r.status),
            },
        };
        rows.push([
            s.id.to_string(),
            title,
            s.model.clone(),
            to_wire(&s.status),
            last,
            match &s.waiting_retry {
                Some(w) => format!(
                    "{}: retry {} in {}s ({})",
                    s.auto_retry.as_str(),
                    w.attempt,
                    ((w.fires_at - now).max(0) + 999) / 1000,
                    w.reason
                ),
                None => s.auto_retry.as_str().to_string(),
            },
        ]);
    }
    table(&rows)
}

/// Rows in aligned columns, two spaces apart; cells are [`untrusted`] text, escaped
/// before they are measured.
fn table<const N: usize>(rows: &[[String; N]]) -> String {
    let rows: Vec<[String; N]> = rows
        .iter()
        .map(|r| r.clone().map(|c| untrusted(&c).into_owned()))
        .collect();
    let widths: Vec<usize> = (0..N)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    rows.iter()
        .map(|r| {
            let cells: Vec<String> = r
                .iter()
                .zip(&widths)
                .map(|(c, w)| format!("{c:<w$}"))
                .collect();
            cells.join("  ").trim_end().to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// One row per tool: its source, the source's transport and status, and the tool's name as
/// a model sees it; a source without tools shows its status and error.
pub fn tools_table(servers: &[ToolServer]) -> String {
    let mut rows = vec![["SOURCE", "TRANSPORT", "STATUS", "TOOL", "NOTE"].map(String::from)];
    for s in servers {
        let head = |tool: String, note: String| {
            [
                s.name.clone(),
                to_wire(&s.transport),
                to_wire(&s.status),
                tool,
                note,
            ]
        };
        if s.tools.is_empty() {
            rows.push(head("-".into(), s.error.clone().unwrap_or_default()));
        }
        for t in &s.tools {
            let note = match (t.read_only, t.destructive) {
                (Some(true), _) => "read-only",
                (_, Some(true)) => "destructive",
                _ => "",
            };
            rows.push(head(
                server::tools::model_name(&s.name, &t.name),
                note.into(),
            ));
        }
    }
    table(&rows)
}

/// The calls waiting for approval: one block each, with the commands that decide it.
pub fn approvals_table(list: &app::wire::Approvals) -> String {
    if list.approvals.is_empty() {
        return "no tool call waits for your approval".into();
    }
    let mut out = format!(
        "{} tool call(s) wait for your approval:\n",
        list.approvals.len()
    );
    for w in &list.approvals {
        out.push_str(&format!(
            "\n{}\n{}\n",
            approval_line(&w.session_id, &w.run_id, &w.call),
            arguments_shown(&w.call.arguments)
        ));
    }
    if let Some(next) = &list.next_before {
        let _ = write!(
            out,
            "\nMore calls wait than these {} (oldest first): decide these, or page on with \
             GET /api/v1/approvals?before={next}",
            list.approvals.len()
        );
    }
    out
}

/// The most characters of a call's arguments the table shows (as the page's card does).
const ARGS_SHOWN: usize = 4000;

/// A waiting call's arguments as indented JSON, two spaces in: whole up to [`ARGS_SHOWN`]
/// characters, else that many and how many are left out and how to read them all (what is
/// shown is what runs: CONTRACT §8).
fn arguments_shown(arguments: &Value) -> String {
    let text = serde_json::to_string_pretty(arguments).unwrap_or_else(|_| arguments.to_string());
    let n = text.chars().count();
    let shown: String = text.chars().take(ARGS_SHOWN).collect();
    let mut out: String = shown.lines().map(|l| format!("  {l}\n")).collect();
    out.pop();
    if n > ARGS_SHOWN {
        let _ = write!(
            out,
            "\n  … {} more characters not shown ({n} in all): `mulligan approvals --json` \
             prints every waiting call's arguments whole",
            n - ARGS_SHOWN
        );
    }
    out
}

/// A waiting call and the commands that decide it.
pub fn approval_line(session: &SessionId, run: &RunId, call: &ToolCall) -> String {
    let says = match call.annotations {
        Some(a) if a.read_only == Some(true) => "reads only",
        Some(a) if a.destructive == Some(true) => "may change or delete",
        _ => "may change things",
    };
    format!(
        "[tool {}/{} waits for your approval ({says}), session {session}]\n  \
         mulligan approve {run} {id}   |   mulligan deny {run} {id} [--reason TEXT]",
        call.server,
        call.tool,
        id = call.id
    )
}

/// One line per call event: `[tool mulligan/list_sessions: ok, 12 ms]`.
pub fn tool_line(call: &ToolCall) -> String {
    let status = match call.status {
        ToolCallStatus::Running => "running".to_string(),
        other => {
            let took = call
                .finished_at
                .map(|f| format!(", {} ms", f.saturating_sub(call.started_at).max(0)))
                .unwrap_or_default();
            format!("{}{took}", to_wire(&other))
        }
    };
    let server = if call.server.is_empty() {
        "?"
    } else {
        call.server.as_str()
    };
    let asked = call.approval.as_ref().map_or_else(String::new, |a| {
        let waited = a
            .decided_at
            .map(|d| {
                format!(
                    " after {:.1} s",
                    d.saturating_sub(a.asked_at).max(0) as f64 / 1000.0
                )
            })
            .unwrap_or_default();
        match a.decision {
            None => " · waits for your approval".to_string(),
            Some(Decision::TimedOut) => format!(" · nobody decided{waited}: timed out"),
            Some(d) => format!(
                " · {} by {}{waited}",
                match d {
                    Decision::AllowOnce => "allowed once",
                    Decision::AllowAlways => "allowed always",
                    Decision::RejectOnce => "denied",
                    _ => "denied always",
                },
                a.by.map_or("?", |b| b.as_str())
            ),
        }
    });
    format!("[tool {server}/{}: {status}{asked}]", call.tool)
}

/// One row per model: its id (the default marked), status (a cooldown's end in UTC), whether
/// its steps get tools, and its fallback chain.
pub fn models_table(list: &ModelList) -> String {
    if list.models.is_empty() {
        return "no models".into();
    }
    let now = server::clock::now_ms();
    let mut rows = vec![["MODEL", "STATUS", "TOOLS", "FALLBACKS"].map(String::from)];
    for m in &list.models {
        rows.push([
            if m.id == list.default_model {
                format!("{} (default)", m.id)
            } else {
                m.id.clone()
            },
            model_status(m, now),
            if m.tools { "on" } else { "off" }.into(),
            if m.fallbacks.is_empty() {
                "-".into()
            } else {
                m.fallbacks.join(", ")
            },
        ]);
    }
    table(&rows)
}

/// `ok`, or `cooling until 14:32 UTC (in 49 min)`.
fn model_status(m: &ModelInfo, now: Millis) -> String {
    match m.cooling_until {
        Some(until) if until > now => format!(
            "{} until {} UTC ({})",
            m.status.as_str(),
            clock_text(&utc(until), &utc(now)),
            relative(until, now)
        ),
        _ => m.status.as_str().to_string(),
    }
}

/// The first 200 characters of an answer that is not the API's, for an error message.
pub fn snippet(raw: &str) -> String {
    let s: String = raw.trim().chars().take(200).collect();
    if s.is_empty() {
        "(empty body)".into()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn untrusted_text_shows_every_control_character_but_newline_and_tab() {
        assert!(matches!(
            untrusted("plain\ttext\nline 2 é"),
            Cow::Borrowed(_)
        ));
        assert_eq!(
            untrusted("\x1b]52;c;aGk=\x07 up\x1b[1A\x1b[2K\r"),
            "\\x1b]52;c;aGk=\\x07 up\\x1b[1A\\x1b[2K\\x0d"
        );
        assert_eq!(
            untrusted("\0 del\x7f c1\u{9b}2J \u{85}"),
            "\\x00 del\\x7f c1\\u{9b}2J \\u{85}"
        );
        // An OSC 8 link shows its target.
        assert_eq!(
            untrusted("\x1b]8;;https://x.test\x1b\\click\x1b]8;;\x1b\\"),
            "\\x1b]8;;https://x.test\\x1b\\click\\x1b]8;;\\x1b\\"
        );
        // Escaping twice changes nothing more.
        let once = untrusted("a\x1b[31mb").into_owned();
        assert_eq!(untrusted(&once), once);
    }

    #[test]
    fn bidi_overrides_are_shown_escaped() {
        // "rm -rf /tmp/x" that reads as something else when the override is honoured.
        let trojan = "{\"path\": \"/tmp/\u{202e}x/ \u{2066}safe\u{2069}\"}";
        assert_eq!(
            untrusted(trojan),
            "{\"path\": \"/tmp/\\u{202e}x/ \\u{2066}safe\\u{2069}\"}"
        );
        assert!(
            matches!(untrusted("שלום abc"), Cow::Borrowed(_)),
            "RTL text itself stays"
        );
    }

    #[test]
    fn a_waiting_call_s_arguments_are_whole_or_say_what_is_left_out() {
        let short = arguments_shown(&json!({"n": 1, "path": "/srv/a"}));
        assert_eq!(short, "  {\n    \"n\": 1,\n    \"path\": \"/srv/a\"\n  }");
        let long = arguments_shown(&json!({"content": "x".repeat(10_000)}));
        let n = serde_json::to_string_pretty(&json!({"content": "x".repeat(10_000)}))
            .unwrap()
            .chars()
            .count();
        assert!(
            long.ends_with(&format!(
                "… {} more characters not shown ({n} in all): `mulligan approvals --json` \
                 prints every waiting call's arguments whole",
                n - ARGS_SHOWN
            )),
            "{long}"
        );
        assert!(long.contains(&"x".repeat(3000)));
    }

    #[test]
    fn models_mark_the_default_and_a_cooldown() {
        let now = server::clock::now_ms();
        let list: ModelList = serde_json::from_value(json!({"default_model": "a/big", "models": [
            {"id": "a/big", "provider": "a", "kind": "openai", "tools": true, "status": "ok",
             "fallbacks": ["b/small"]},
            {"id": "b/small", "provider": "b", "kind": "anthropic", "tools": false,
             "status": "cooling", "cooling_until": now + 49 * 60_000 + 30_000}]}))
        .unwrap();
        let text = models_table(&list);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[1].starts_with("a/big (default)"), "{text}");
        assert!(lines[1].ends_with("on     b/small"), "{text}");
        assert!(lines[2].contains("cooling until "), "{text}");
        assert!(lines[2].contains(" UTC (in 49 min)  off"), "{text}");
        assert!(lines[2].ends_with('-'), "{text}");
    }
}
