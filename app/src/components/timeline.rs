//! A turn's timeline, folded under its reply until opened: who started the run, its Tier 1
//! attempts and their waits, its fallbacks and its tool calls, drawn as bars on the run's
//! time axis (plain HTML, positioned by percent; times relative to the run's start).
use super::state::Chat;
use crate::api;
use crate::client::fetch_json;
use crate::wire::{
    AutoRetry, Message, Millis, ProvenanceKind, Run, RunDetail, RunKind, RunStatus, ToolCallStatus,
};
use leptos::prelude::*;

/// An attempt's error is cut to this many characters (the whole text shows on hover).
const ERROR_CHARS: usize = 70;

/// One bar of a row: where it starts and how wide it is, in hundredths of a percent of the
/// run's duration (integers: float formatting would cost the browser bundle).
#[derive(Clone, Debug, PartialEq)]
pub struct Bar {
    /// Its CSS classes.
    pub class: &'static str,
    pub left: u32,
    pub width: u32,
}

impl Bar {
    pub fn style(&self) -> String {
        format!("left:{};width:{}", percent(self.left), percent(self.width))
    }
}

/// One line of the timeline: when it began (relative to the run's start), its bar (and the
/// wait after it), and what happened.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// Its CSS classes.
    pub class: &'static str,
    pub at: String,
    pub bar: Option<Bar>,
    pub wait: Option<Bar>,
    pub text: String,
    /// The whole text when `text` was cut.
    pub title: Option<String>,
}

/// A run, drawn.
#[derive(Clone, Debug, PartialEq)]
pub struct Drawn {
    /// "Started by … · 3.4 s · completed".
    pub head: String,
    pub rows: Vec<Row>,
}

/// Who asked for the run, in words: the operator's prompt or click, a tab's automatic retry
/// (Tier 2 in the browser), the server's background retry, or a retry-now from elsewhere.
/// `auto_retry`: the session's setting, which tells a tab's retry of a tool turn from the
/// server's (both arrive as an automatic resume).
pub fn started_by(run: &Run, auto_retry: AutoRetry) -> String {
    let what = match run.kind {
        RunKind::Prompt => "",
        RunKind::Regenerate => " (regenerate",
        RunKind::Resend => " (resend",
        RunKind::Continuation => " (continuation",
    };
    let attempt = run
        .provenance
        .as_ref()
        .and_then(|p| p.attempt)
        .filter(|_| !what.is_empty())
        .map_or_else(String::new, |n| format!(", attempt {n}"));
    let close = if what.is_empty() { "" } else { ")" };
    let who = match &run.provenance {
        None => "the operator's prompt".to_string(),
        Some(p) => match (&p.kind, p.manual == Some(true), &p.from) {
            (ProvenanceKind::Regenerate, true, _) => "the operator's Regenerate".into(),
            (ProvenanceKind::Regenerate, false, _) => "an automatic retry in a browser tab".into(),
            (ProvenanceKind::AutoResume, true, Some(from)) => format!("a retry-now from {from}"),
            (ProvenanceKind::AutoResume, true, None) => "the operator's retry-now".into(),
            (ProvenanceKind::AutoResume, false, _) => match auto_retry {
                AutoRetry::Background => "the server's background retry".into(),
                _ => "an automatic retry".into(),
            },
            _ => "the operator's prompt".into(),
        },
    };
    format!("{who}{what}{attempt}{close}")
}

/// Draws a run from its detail (attempts and tool calls in order, as the API lists them);
/// `now` ends a run still going.
pub fn layout(d: &RunDetail, auto_retry: AutoRetry, now: Millis) -> Drawn {
    let run = &d.run;
    let attempts = &d.attempts;
    let calls = &d.tool_calls;
    let t0 = attempts
        .iter()
        .map(|a| a.started_at)
        .chain(run.started_at)
        .min()
        .unwrap_or(run.created_at);
    let latest = attempts
        .iter()
        .map(|a| a.started_at)
        .chain(calls.iter().map(|c| c.finished_at.unwrap_or(c.started_at)))
        .max()
        .unwrap_or(t0);
    let end = run
        .finished_at
        .unwrap_or(if run.status.is_active() { now } else { latest })
        .max(latest);
    let span = (end - t0).max(1);
    let pos = |t: Millis| -> u32 {
        let t = (t - t0).clamp(0, span);
        u32::try_from(t * 10_000 / span).unwrap_or(10_000)
    };
    let bar = |class, from: Millis, to: Millis| Bar {
        class,
        left: pos(from),
        width: pos(to.max(from)) - pos(from),
    };
    // In time order as they come; at one moment, in the order added (a fallback before the
    // attempt it led to). Inserted in place: a sort would cost the browser bundle.
    let mut rows: Vec<(Millis, Row)> = Vec::new();
    let mut add = |t: Millis, row: Row| {
        let at = rows.iter().rposition(|(u, _)| *u <= t).map_or(0, |i| i + 1);
        rows.insert(at, (t, row));
    };
    // Each fallback with the attempt it led to: the next attempt on its model right after one
    // on a model it passed over (a cooling model is passed over without an attempt: then the
    // next attempt on its model).
    let model_of = |i: usize| attempts.get(i).and_then(|a| a.model.as_deref());
    let mut from = 0;
    let mut fallbacks: Vec<(Option<usize>, Row)> = Vec::new();
    for s in run.served.iter().filter(|s| !s.after.is_empty()) {
        let on = |i: &usize| model_of(*i) == Some(s.model.as_str());
        let found = (from.max(1)..attempts.len())
            .filter(on)
            .find(|&i| {
                s.after
                    .iter()
                    .any(|f| model_of(i - 1) == Some(f.model.as_str()))
            })
            .or_else(|| (from..attempts.len()).find(on));
        if let Some(i) = found {
            from = i + 1;
        }
        let at = found.map(|i| attempts[i].started_at);
        let mut text = format!("step {} fell back to {}: ", s.step, s.model);
        super::served::passed_over(&s.after, &mut text);
        fallbacks.push((
            found,
            Row {
                class: "tl-row fallback",
                at: at.map_or_else(String::new, |t| rel(t - t0)),
                bar: at.map(|t| bar("tl-bar fallback", t, t)),
                wait: None,
                text,
                title: None,
            },
        ));
    }
    for (i, a) in attempts.iter().enumerate() {
        let next = attempts.get(i + 1).map(|n| n.started_at);
        let model = a.model.as_deref().unwrap_or("the session's model");
        let mut wait = None;
        let (main, text, title) = match &a.error {
            Some(error) => {
                let stop = match (a.retry_in_ms, next) {
                    (Some(wait), Some(next)) => (next - wait).max(a.started_at),
                    (_, Some(next)) => next,
                    (_, None) => end,
                };
                let waited = a.retry_in_ms.map(|w| {
                    wait = Some(bar("tl-bar wait", stop, next.unwrap_or(stop + w)));
                    format!(" · waited {}", took(w))
                });
                let cut = cut(error, ERROR_CHARS);
                let title = (cut.len() < error.len()).then(|| error.clone());
                (
                    bar("tl-bar failed", a.started_at, stop),
                    format!(
                        "attempt {} · {model} · failed: {cut}{}",
                        a.n,
                        waited.unwrap_or_default()
                    ),
                    title,
                )
            }
            None => {
                // It streams until its step asks for tools, the next step opens, or the run ends.
                let stop = calls
                    .iter()
                    .map(|c| c.started_at)
                    .filter(|&t| t >= a.started_at)
                    .chain(next)
                    .min()
                    .unwrap_or(end);
                let outcome = if next.is_none() && run.status.is_active() {
                    "answering"
                } else {
                    "answered"
                };
                (
                    bar("tl-bar", a.started_at, stop),
                    format!("attempt {} · {model} · {outcome}", a.n),
                    None,
                )
            }
        };
        for (_, row) in fallbacks.iter().filter(|(at, _)| *at == Some(i)) {
            add(a.started_at, row.clone());
        }
        add(
            a.started_at,
            Row {
                class: "tl-row attempt",
                at: rel(a.started_at - t0),
                bar: Some(main),
                wait,
                text,
                title,
            },
        );
    }
    for (_, row) in fallbacks.into_iter().filter(|(at, _)| at.is_none()) {
        add(t0, row);
    }
    for c in calls {
        let stop = c.finished_at.unwrap_or(end);
        let status = match c.status {
            ToolCallStatus::Interrupted => "interrupted: outcome unknown",
            s => s.as_str(),
        };
        let took = c
            .finished_at
            .map_or_else(String::new, |f| format!(" · {}", took(f - c.started_at)));
        add(
            c.started_at,
            Row {
                class: "tl-row tool",
                at: rel(c.started_at - t0),
                bar: Some(bar("tl-bar tool", c.started_at, stop)),
                wait: None,
                text: format!("tool {} ({}){took} · {status}", c.tool, c.server),
                title: None,
            },
        );
    }
    let queued = run.started_at.map_or(0, |s| s - run.created_at);
    let queued = if queued >= 100 {
        format!(" · queued {} first", took(queued))
    } else {
        String::new()
    };
    let state = match run.status {
        RunStatus::Queued => "queued",
        RunStatus::Running => "running",
        RunStatus::Completed => "completed",
        RunStatus::Failed => "failed",
        RunStatus::Cancelled => "stopped",
    };
    Drawn {
        head: format!(
            "Started by {}{queued} · {} · {state}",
            started_by(run, auto_retry),
            took(end - t0)
        ),
        rows: rows.into_iter().map(|(_, r)| r).collect(),
    }
}

/// `n` hundredths of a percent, as CSS reads it: `12.34%`.
fn percent(n: u32) -> String {
    format!("{}.{:02}%", n / 100, n % 100)
}

/// A duration in words: `0.4 s`, `12.3 s`, `2 min 5 s`.
pub fn secs(ms: Millis) -> String {
    let ms = ms.max(0);
    let s = ms / 1000;
    if s >= 60 {
        format!("{} min {} s", s / 60, s % 60)
    } else {
        format!("{s}.{} s", ms % 1000 / 100)
    }
}

/// How long something took: `89 ms` under a second, else as [`secs`].
pub fn took(ms: Millis) -> String {
    if ms < 1000 {
        format!("{} ms", ms.max(0))
    } else {
        secs(ms)
    }
}

/// A moment relative to the run's start: `+1.2 s`.
fn rel(ms: Millis) -> String {
    format!("+{}", secs(ms))
}

/// `text`'s first `chars` characters, with `…` when it was longer.
fn cut(text: &str, chars: usize) -> String {
    match text.char_indices().nth(chars) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

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
            let url = api::RUN.url(&[&rid]);
            let answer = fetch_json::<RunDetail>(api::RUN.method(), &url, None).await;
            let auto_retry = chat
                .session
                .with_untracked(|s| s.as_ref().map(|s| s.auto_retry).unwrap_or_default());
            drawn.set(Some(match answer {
                Ok(d) => layout(&d, auto_retry, crate::clock::now_ms()),
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

/// Appends `text` with HTML's five special characters escaped: it reads as text, in an
/// element or a quoted attribute.
pub(super) fn escape(text: &str, out: &mut String) {
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{Attempt, FellBack, Provenance, RetryClass, Served, ToolCall};

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
            id: "c1".into(),
            step: 1,
            server: "mulligan".into(),
            tool: "list_sessions".into(),
            arguments: serde_json::json!({}),
            status: ToolCallStatus::Ok,
            result: None,
            started_at: started,
            finished_at: Some(finished),
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
        }
    }

    #[test]
    fn a_fallen_back_tool_turn_is_drawn_in_time_order() {
        let mut turn = tool_turn();
        turn.tool_calls = vec![call(2_000, 3_000)];
        let d = layout(&turn, AutoRetry::Browser, 99_999);
        assert_eq!(
            d.head,
            "Started by the operator's prompt · 10.0 s · completed"
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
        };
        let drawn = layout(&d, AutoRetry::Browser, 0);
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
        let drawn = layout(&d, AutoRetry::Browser, 21_000);
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
            started_by(&r, auto)
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

    #[test]
    fn hostile_text_is_escaped_in_the_html() {
        let mut d = tool_turn();
        d.attempts[1].error = Some("<img src=x onerror=alert(1)> & \"'".into());
        let h = html(&layout(&d, AutoRetry::Browser, 0));
        assert!(!h.contains("<img"), "{h}");
        assert!(
            h.contains("&lt;img src=x onerror=alert(1)&gt; &amp; &quot;&#39;"),
            "{h}"
        );
        assert!(
            h.contains(r#"<span class="tl-bar failed" style="left:30.00%;width:10.00%"></span>"#),
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
}
