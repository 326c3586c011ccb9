//! The timeline's tests: rows in time order, who started a run, escaping, labels.
use super::layout::*;
use super::*;
use crate::wire::{Attempt, FellBack, Provenance, RetryClass, Served, ToolCall, ToolCallId};
use crate::wire::{AutoRetry, Millis, ProvenanceKind, Run, RunDetail, RunStatus, ToolCallStatus};

fn run(json: serde_json::Value) -> Run {
    let mut base = serde_json::json!({
        "id": "r_1", "session_id": "s_1", "anchor_message_id": "m_1", "status": "completed",
        "kind": "prompt", "attempt": 1, "tier1_attempts": 1, "created_at": 1_000,
        "started_at": 1_000, "finished_at": 11_000,
    });
    for (k, v) in json.as_object().unwrap() {
        base[k] = v.clone();
    }
    serde_json::from_value(base).unwrap()
}

fn attempt(n: u32, at: Millis, model: &str, error: Option<&str>, wait: Option<i64>) -> Attempt {
    Attempt {
        n,
        started_at: at,
        error: error.map(str::to_string),
        retry_in_ms: wait,
        model: Some(model.into()),
    }
}

fn call(started: Millis, finished: Millis) -> ToolCall {
    ToolCall {
        id: ToolCallId::new("c1"),
        step: 1,
        server: "mulligan".into(),
        tool: "list_sessions".into(),
        arguments: serde_json::json!({}),
        status: ToolCallStatus::Ok,
        result: None,
        started_at: started,
        finished_at: Some(finished),
        approval: None,
        annotations: None,
    }
}

/// The demo agent's turn falling back after its tool call: step 1 on the flaky model,
/// its tool, step 2 failing twice there, then answered by the other model.
fn tool_turn() -> RunDetail {
    let mut r = run(serde_json::json!({}));
    r.served = vec![
        Served {
            step: 1,
            model: "demo/flaky".into(),
            after: vec![],
        },
        Served {
            step: 2,
            model: "demo/agent".into(),
            after: vec![FellBack {
                model: "demo/flaky".into(),
                retry_class: RetryClass::ServerError,
            }],
        },
    ];
    RunDetail {
        run: r,
        attempts: vec![
            attempt(1, 1_000, "demo/flaky", None, None),
            attempt(2, 4_000, "demo/flaky", Some("HTTP 503"), Some(1_000)),
            attempt(3, 6_000, "demo/flaky", Some("HTTP 503"), None),
            attempt(4, 7_000, "demo/agent", None, None),
        ],
        tool_calls: vec![],
        instance: None,
    }
}

#[test]
fn a_fallen_back_tool_turn_is_drawn_in_time_order() {
    let mut turn = tool_turn();
    turn.tool_calls = vec![call(2_000, 3_000)];
    let d = layout(&turn, AutoRetry::Browser, None, 99_999);
    assert_eq!(
        d.head,
        "Started by the operator's prompt · 10.0 s · completed"
    );
    // Where instances share a database, the head says which one ran the turn.
    turn.instance = Some("i-0193a2b4".into());
    let d = layout(&turn, AutoRetry::Browser, None, 99_999);
    assert_eq!(
        d.head,
        "Started by the operator's prompt on instance i-0193a2b4 · 10.0 s · completed"
    );
    let rows: Vec<(&str, &str, &str)> = d
        .rows
        .iter()
        .map(|r| {
            (
                r.class.trim_start_matches("tl-row "),
                r.at.as_str(),
                r.text.as_str(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        vec![
            ("attempt", "+0.0 s", "attempt 1 · demo/flaky · answered"),
            (
                "tool",
                "+1.0 s",
                "tool list_sessions (mulligan) · 1.0 s · ok"
            ),
            (
                "attempt",
                "+3.0 s",
                "attempt 2 · demo/flaky · failed: HTTP 503 · waited 1.0 s"
            ),
            (
                "attempt",
                "+5.0 s",
                "attempt 3 · demo/flaky · failed: HTTP 503"
            ),
            (
                "fallback",
                "+6.0 s",
                "step 2 fell back to demo/agent: demo/flaky had a server error"
            ),
            ("attempt", "+6.0 s", "attempt 4 · demo/agent · answered"),
        ]
    );
    let bar = |i: usize| d.rows[i].bar.clone().unwrap();
    // Bars: the first attempt streams until its tool call; the tool takes a tenth.
    assert_eq!(bar(0).style(), "left:0.00%;width:10.00%");
    assert_eq!(bar(1).style(), "left:10.00%;width:10.00%");
    // The failed attempt, then its wait up to the next attempt.
    let wait = d.rows[2].wait.clone().unwrap();
    assert_eq!(
        (bar(2).class, bar(2).left, bar(2).width),
        ("tl-bar failed", 3_000, 1_000)
    );
    assert_eq!(
        (wait.class, wait.left, wait.width),
        ("tl-bar wait", 4_000, 1_000)
    );
    assert_eq!(bar(4).left, 6_000);
}

#[test]
fn each_fallback_comes_right_before_the_attempt_it_led_to() {
    let mut r = run(serde_json::json!({}));
    let fell = |step, class| Served {
        step,
        model: "b/x".into(),
        after: vec![FellBack {
            model: "a/x".into(),
            retry_class: class,
        }],
    };
    // Step 2 passes over `a/x` without a request: its cooldown holds.
    r.served = vec![
        fell(1, RetryClass::Overloaded),
        fell(2, RetryClass::RateLimited),
    ];
    let d = RunDetail {
        run: r,
        attempts: vec![
            attempt(1, 1_000, "a/x", Some("529"), Some(100)),
            // The same millisecond: the fallback answers at once.
            attempt(2, 1_100, "a/x", Some("529"), None),
            attempt(3, 1_100, "b/x", None, None),
            attempt(4, 3_000, "b/x", None, None),
        ],
        tool_calls: vec![call(2_000, 2_500)],
        instance: None,
    };
    let drawn = layout(&d, AutoRetry::Browser, None, 0);
    let texts: Vec<&str> = drawn.rows.iter().map(|r| r.text.as_str()).collect();
    assert_eq!(
        texts,
        vec![
            "attempt 1 · a/x · failed: 529 · waited 100 ms",
            "attempt 2 · a/x · failed: 529",
            "step 1 fell back to b/x: a/x was overloaded",
            "attempt 3 · b/x · answered",
            "tool list_sessions (mulligan) · 500 ms · ok",
            "step 2 fell back to b/x: a/x was rate limited",
            "attempt 4 · b/x · answered",
        ]
    );
}

#[test]
fn a_running_run_ends_now_and_a_long_error_is_cut() {
    let mut d = tool_turn();
    d.run.status = RunStatus::Running;
    d.run.finished_at = None;
    d.run.served.clear();
    d.attempts.truncate(2);
    let long = "x".repeat(200);
    d.attempts[1].error = Some(long.clone());
    d.attempts[1].retry_in_ms = None;
    let drawn = layout(&d, AutoRetry::Browser, None, 21_000);
    assert!(drawn.head.ends_with("· 20.0 s · running"), "{}", drawn.head);
    let failed = &drawn.rows[1];
    assert_eq!(failed.title.as_deref(), Some(long.as_str()));
    assert!(failed.text.ends_with("x…"));
    // Failed with no attempt after it: its bar runs to now.
    let bar = failed.bar.clone().unwrap();
    assert_eq!(bar.left + bar.width, 10_000);
    assert!(failed.wait.is_none());
}

#[test]
fn who_started_the_run() {
    let with = |kind, p: Option<Provenance>, auto| {
        let mut r = run(serde_json::json!({ "kind": kind }));
        r.provenance = p;
        started_by(&r, auto, Some("tab-1"))
    };
    let p = |kind: ProvenanceKind, manual: Option<bool>, from: Option<&str>| {
        Some(Provenance {
            kind,
            prompt_id: None,
            attempt: Some(2),
            manual,
            from: from.map(str::to_string),
        })
    };
    use AutoRetry::{Background, Browser};
    use ProvenanceKind::{AutoResume, Regenerate};
    assert_eq!(with("prompt", None, Browser), "the operator's prompt");
    assert_eq!(
        with("regenerate", p(Regenerate, Some(true), None), Browser),
        "the operator's Regenerate (regenerate, attempt 2)"
    );
    assert_eq!(
        with("regenerate", p(Regenerate, None, None), Browser),
        "an automatic retry in a browser tab (regenerate, attempt 2)"
    );
    // A tab's retry says which tab: the reading one (`tab-1`) or another.
    assert_eq!(
        with("regenerate", p(Regenerate, None, Some("tab-1")), Browser),
        "an automatic retry in this tab (regenerate, attempt 2)"
    );
    assert_eq!(
        with("regenerate", p(Regenerate, None, Some("tab-2")), Browser),
        "an automatic retry in another tab (regenerate, attempt 2)"
    );
    // A tool turn's Tier 2 continues it: still the tab's retry, whatever the setting says now.
    assert_eq!(
        with(
            "continuation",
            p(AutoResume, Some(false), Some("tab-1")),
            Background
        ),
        "an automatic retry in this tab (continuation, attempt 2)"
    );
    assert_eq!(
        with("continuation", p(AutoResume, Some(false), None), Background),
        "the server's background retry (continuation, attempt 2)"
    );
    assert_eq!(
        with("resend", p(AutoResume, Some(true), None), Browser),
        "the operator's retry-now (resend, attempt 2)"
    );
    assert_eq!(
        with(
            "resend",
            p(AutoResume, Some(true), Some("s_parent")),
            Browser
        ),
        "a retry-now from s_parent (resend, attempt 2)"
    );
}

/// Rendered as the server renders views (HTML needs Leptos' `ssr`).
#[cfg(feature = "ssr")]
#[test]
fn hostile_text_is_escaped_in_the_html() {
    let mut d = tool_turn();
    d.attempts[1].error = Some("<img src=x onerror=alert(1)> & \"'".into());
    let h = rows(layout(&d, AutoRetry::Browser, None, 0)).to_html();
    assert!(!h.contains("<img"), "{h}");
    assert!(
        h.contains("&lt;img src=x onerror=alert(1)&gt; &amp; \"'"),
        "{h}"
    );
    assert!(
        h.contains(r#"<span class="tl-bar failed" style="left:30.00%;width:10.00%;"></span>"#),
        "{h}"
    );
}

#[test]
fn durations_and_positions_read_plainly() {
    assert_eq!(secs(420), "0.4 s");
    assert_eq!(secs(12_345), "12.3 s");
    assert_eq!(secs(125_000), "2 min 5 s");
    assert_eq!(secs(-3), "0.0 s");
    assert_eq!(took(89), "89 ms");
    assert_eq!(took(1_250), "1.2 s");
    assert_eq!(percent(5), "0.05%");
    assert_eq!(percent(10_000), "100.00%");
}

#[test]
fn an_asked_call_says_when_what_was_decided_by_whom_and_how_long_it_waited() {
    use crate::wire::{Approval, DecidedBy, Decision};
    let mut d = tool_turn();
    d.run.served.clear();
    d.attempts.truncate(1);
    let mut asked = call(2_000, 6_000);
    asked.tool = "rename_session".into();
    asked.approval = Some(Approval {
        asked_at: 2_000,
        decision: Some(Decision::AllowOnce),
        reason: None,
        decided_at: Some(5_400),
        by: Some(DecidedBy::Page),
        from: Some("tab-1".into()),
    });
    let mut denied = call(2_000, 3_000);
    denied.id = ToolCallId::new("c2");
    denied.status = ToolCallStatus::Denied;
    denied.approval = Some(Approval {
        asked_at: 2_000,
        decision: Some(Decision::RejectOnce),
        reason: Some("not today".into()),
        decided_at: Some(3_000),
        by: Some(DecidedBy::Cli),
        from: None,
    });
    d.tool_calls = vec![asked, denied];
    let drawn = layout(&d, AutoRetry::Browser, Some("tab-1"), 0);
    let rows: Vec<(&str, &str, &str)> = drawn
        .rows
        .iter()
        .map(|r| (r.class, r.at.as_str(), r.text.as_str()))
        .collect();
    assert_eq!(
        rows[1..],
        [
            (
                "tl-row asked",
                "+1.0 s",
                "asked before rename_session (mulligan) · allowed once by page, this tab · waited 3.4 s"
            ),
            (
                "tl-row tool",
                "+1.0 s",
                "tool rename_session (mulligan) · 4.0 s · ok"
            ),
            (
                "tl-row asked",
                "+1.0 s",
                "asked before list_sessions (mulligan) · denied: not today by cli · waited 1.0 s"
            ),
            (
                "tl-row tool",
                "+1.0 s",
                "tool list_sessions (mulligan) · 1.0 s · denied"
            ),
        ]
    );
    // The ask's bar spans its wait.
    let bar = drawn.rows[1].bar.clone().unwrap();
    assert_eq!(
        (bar.class, bar.left, bar.width),
        ("tl-bar asked", 1_000, 3_400)
    );
    // Another tab's decision, and a call still waiting at `now`.
    let mut c = d.tool_calls[0].clone();
    c.approval.as_mut().unwrap().from = Some("tab-2".into());
    let text = crate::components::approval::asked_row(&c, Some("tab-1"), 0, took).unwrap();
    assert!(text.contains("by page, another tab"), "{text}");
    c.approval.as_mut().unwrap().decision = None;
    let text = crate::components::approval::asked_row(&c, None, 9_000, took).unwrap();
    assert_eq!(
        text,
        "asked before rename_session (mulligan) · waiting for a decision · 7.0 s so far"
    );
}
