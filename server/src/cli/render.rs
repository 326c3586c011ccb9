//! How the client commands print: one human line per answer, the session, tool and model
//! tables, a run's timeline, and the API's JSON on one line for `--json`.
use app::clock::{clock_text, relative, utc};
use app::wire::{
    Millis, ModelInfo, ModelList, RunDetail, RunStatus, Served, Session, ToolCall, ToolCallStatus,
    ToolServer,
};
use serde_json::Value;

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

/// Rows in aligned columns, two spaces apart.
fn table<const N: usize>(rows: &[[String; N]]) -> String {
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
    format!("[tool {server}/{}: {status}]", call.tool)
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

/// A run's timeline: a header, then each Tier 1 attempt (its model, error and wait), each
/// step's answering model and what it fell back from, each tool call, and how the run ended,
/// timed from the run's start. `messages` are its session's, for the tool calls of its reply.
pub fn run_timeline(detail: &RunDetail) -> String {
    let r = &detail.run;
    let start = r.started_at.unwrap_or(r.created_at);
    let at = |t: Millis| format!("{:>8}", format!("{:+.1} s", (t - start) as f64 / 1000.0));
    let untimed = " ".repeat(8);
    let mut out = vec![format!(
        "run {} of session {}: {}, {}{}{}",
        r.id,
        r.session_id,
        r.status.as_str(),
        r.kind.as_str(),
        if r.attempt > 1 {
            format!(" (attempt {})", r.attempt)
        } else {
            String::new()
        },
        detail
            .instance
            .as_ref()
            .map_or_else(String::new, |i| format!(", on instance {i}"))
    )];
    let now = server::clock::now_ms();
    let counts = format!(
        "{} step(s), {} tool call(s) executed",
        r.steps, r.tools_executed
    );
    out.push(match r.started_at {
        Some(s) => format!(
            "started {} UTC, {:.1} s after it was asked; {counts}",
            clock_text(&utc(s), &utc(now)),
            (s - r.created_at).max(0) as f64 / 1000.0
        ),
        None => format!(
            "asked {} UTC, not started; {counts}",
            clock_text(&utc(r.created_at), &utc(now))
        ),
    });

    let calls = &detail.tool_calls;
    let mut served: Vec<&Served> = r.served.iter().collect();
    served.sort_by_key(|s| s.step);
    let mut shown = Vec::new();
    let mut calls_of = |step: u32, out: &mut Vec<String>| {
        shown.push(step);
        for c in calls.iter().filter(|c| c.step == step) {
            out.push(format!("{}  {}", at(c.started_at), tool_line(c)));
        }
    };
    // Each attempt without an error opened the next step (the attempts are in order).
    let mut opened = 0;
    for a in &detail.attempts {
        let on = a
            .model
            .as_deref()
            .map(|m| format!(" on {m}"))
            .unwrap_or_default();
        match &a.error {
            Some(error) => {
                let wait = a
                    .retry_in_ms
                    .map(|ms| format!("; Tier 1 waits {:.1} s", ms.max(0) as f64 / 1000.0))
                    .unwrap_or_default();
                out.push(format!(
                    "{}  attempt {}{on}: {}{wait}",
                    at(a.started_at),
                    a.n,
                    short(error)
                ));
            }
            None => {
                opened += 1;
                match served.get(opened - 1) {
                    Some(s) => {
                        out.push(format!("{}  {}", at(a.started_at), step_line(s, Some(a.n))));
                        calls_of(s.step, &mut out);
                    }
                    None => {
                        out.push(format!("{}  attempt {}{on}", at(a.started_at), a.n));
                        calls_of(opened as u32, &mut out);
                    }
                }
            }
        }
    }
    // Steps (and calls) the attempts did not account for, e.g. when one went unrecorded.
    for s in served.iter().skip(opened) {
        out.push(format!("{untimed}  {}", step_line(s, None)));
        calls_of(s.step, &mut out);
    }
    for c in calls.iter().filter(|c| !shown.contains(&c.step)) {
        out.push(format!("{}  {}", at(c.started_at), tool_line(c)));
    }
    if calls.is_empty() && r.tools_executed > 0 {
        out.push(format!(
            "{untimed}  (its {} tool call(s) are in a reply no longer shown: it was superseded)",
            r.tools_executed
        ));
    }
    out.push(match (r.status, r.finished_at) {
        (RunStatus::Failed, end) => format!(
            "{}  failed ({}): {}",
            end.map_or(untimed.clone(), at),
            r.retry
                .as_ref()
                .map_or("unclassified", |c| c.retry_class.as_str()),
            short(r.error_message.as_deref().unwrap_or("no message"))
        ),
        (status, Some(end)) => format!("{}  {}", at(end), status.as_str()),
        (RunStatus::Queued, None) => match &r.held_by {
            Some(held) => format!("{untimed}  queued, held behind failed run {held}"),
            None => format!("{untimed}  queued"),
        },
        (status, None) => format!("{untimed}  {} (so far)", status.as_str()),
    });
    out.join("\n")
}

/// `step 2: b/small answered (attempt 4), fell back from a/big (overloaded)`.
fn step_line(s: &Served, attempt: Option<u32>) -> String {
    let mut line = format!("step {}: {} answered", s.step, s.model);
    if let Some(n) = attempt {
        line.push_str(&format!(" (attempt {n})"));
    }
    if !s.after.is_empty() {
        let from: Vec<String> = s
            .after
            .iter()
            .map(|f| format!("{} ({})", f.model, f.retry_class.as_str()))
            .collect();
        line.push_str(&format!(", fell back from {}", from.join(", ")));
    }
    line
}

/// A provider's or the run's error on one line, at most 200 characters.
fn short(text: &str) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() > 200 {
        line.chars().take(199).chain(['…']).collect()
    } else {
        line
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

    fn detail(run: Value, attempts: Value) -> RunDetail {
        let mut r = json!({"id": "r1", "session_id": "s1", "anchor_message_id": "m1",
            "reply_message_id": "m2", "status": "completed", "kind": "prompt", "attempt": 1,
            "tier1_attempts": 0, "created_at": 1_000, "started_at": 1_000,
            "finished_at": 9_000});
        r.as_object_mut()
            .unwrap()
            .extend(run.as_object().unwrap().clone());
        serde_json::from_value(json!({"run": r, "attempts": attempts})).unwrap()
    }

    #[test]
    fn a_tool_turn_that_fell_back_reads_in_time_order() {
        let d = detail(
            json!({"steps": 2, "tools_executed": 1, "served": [
                {"step": 1, "model": "a/big"},
                {"step": 2, "model": "b/small", "after": [{"model": "a/big", "retry_class": "overloaded"}]}]}),
            json!([
                {"n": 1, "started_at": 1_000, "model": "a/big"},
                {"n": 2, "started_at": 3_000, "model": "a/big", "error": "529\nOverloaded", "retry_in_ms": 250},
                {"n": 3, "started_at": 3_250, "model": "a/big", "error": "529 Overloaded"},
                {"n": 4, "started_at": 3_300, "model": "b/small"}]),
        );
        let mut d = d;
        d.tool_calls = serde_json::from_value(json!([{"id": "c1", "step": 1,
            "server": "mulligan", "tool": "list_sessions", "arguments": {}, "status": "ok",
            "started_at": 2_000, "finished_at": 2_012}]))
        .unwrap();
        let text = run_timeline(&d);
        let lines: Vec<&str> = text.lines().skip(2).map(str::trim_start).collect();
        assert_eq!(
            lines,
            [
                "+0.0 s  step 1: a/big answered (attempt 1)",
                "+1.0 s  [tool mulligan/list_sessions: ok, 12 ms]",
                "+2.0 s  attempt 2 on a/big: 529 Overloaded; Tier 1 waits 0.2 s",
                "+2.2 s  attempt 3 on a/big: 529 Overloaded",
                "+2.3 s  step 2: b/small answered (attempt 4), fell back from a/big (overloaded)",
                "+8.0 s  completed",
            ],
            "{text}"
        );
        assert!(
            text.starts_with("run r1 of session s1: completed, prompt\n"),
            "{text}"
        );
        d.instance = Some("i-7".into());
        let text = run_timeline(&d);
        assert!(
            text.starts_with("run r1 of session s1: completed, prompt, on instance i-7\n"),
            "{text}"
        );
    }

    #[test]
    fn steps_without_attempts_and_a_failure_still_show() {
        // An old run: no attempt rows, no served models; it failed.
        let d = detail(
            json!({"status": "failed", "finished_at": 1_500, "served": [{"step": 1, "model": "a/big"}],
                   "retry": {"retryable": true, "retry_class": "network"},
                   "error_message": "connection reset"}),
            json!([]),
        );
        let text = run_timeline(&d);
        let lines: Vec<&str> = text.lines().skip(2).map(str::trim).collect();
        assert_eq!(
            lines,
            [
                "step 1: a/big answered",
                "+0.5 s  failed (network): connection reset"
            ],
            "{text}"
        );
        let queued = detail(
            json!({"status": "queued", "started_at": null, "finished_at": null, "held_by": "r0"}),
            json!([]),
        );
        let text = run_timeline(&queued);
        assert!(text.contains("not started"), "{text}");
        assert!(
            text.ends_with("queued, held behind failed run r0"),
            "{text}"
        );
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
