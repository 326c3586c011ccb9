//! A run's timeline as `mulligan runs show` prints it: its attempts, steps, fallbacks, tool
//! calls and end, timed from the run's start.
use super::render::tool_line;
use app::clock::{clock_text, utc};
use app::wire::{Millis, RunDetail, RunStatus, Served};

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
        (status, Some(end)) => {
            let why = r.stop_reason.as_deref().map_or_else(String::new, |w| {
                format!(" (the agent stopped: {})", short(w))
            });
            format!("{}  {}{why}", at(end), status.as_str())
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

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
    fn an_agent_turn_ended_short_says_why_on_its_last_line() {
        let d = detail(
            json!({"steps": 1, "stop_reason": "max_tokens"}),
            json!([{"n": 1, "started_at": 1_000, "model": "claude/default"}]),
        );
        let text = run_timeline(&d);
        assert_eq!(
            text.lines().last().map(str::trim_start),
            Some("+8.0 s  completed (the agent stopped: max_tokens)"),
            "{text}"
        );
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
}
