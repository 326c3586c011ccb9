//! The timeline's rows worked out from a run, with no view and no I/O: who started it, its
//! attempts and waits, fallbacks and tool calls, placed by percent on the run's time axis.
use crate::wire::{
    AutoRetry, Millis, ProvenanceKind, Run, RunDetail, RunKind, RunStatus, ToolCallStatus,
};

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
/// `this_tab`: the reading tab's id, against which a tab's retry (`provenance.from`) is
/// "this tab" or "another tab".
pub fn started_by(run: &Run, auto_retry: AutoRetry, this_tab: Option<&str>) -> String {
    let in_tab = |from: &Option<String>| match from.as_deref() {
        Some(f) if Some(f) == this_tab => "an automatic retry in this tab",
        Some(f) if crate::wire::is_tab_id(f) => "an automatic retry in another tab",
        _ => "an automatic retry in a browser tab",
    };
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
            (ProvenanceKind::Regenerate, false, from) => in_tab(from).into(),
            (ProvenanceKind::AutoResume, false, from @ Some(f)) if crate::wire::is_tab_id(f) => {
                in_tab(from).into()
            }
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
pub fn layout(d: &RunDetail, auto_retry: AutoRetry, this_tab: Option<&str>, now: Millis) -> Drawn {
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
        crate::components::served::passed_over(&s.after, &mut text);
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
        // Its ask first: when, the decision, by whom and from where, how long it waited.
        if let Some(text) = crate::components::approval::asked_row(c, this_tab, now, took) {
            let asked = c.approval.as_ref().map_or(c.started_at, |a| a.asked_at);
            let decided = c
                .approval
                .as_ref()
                .and_then(|a| a.decided_at)
                .unwrap_or(end);
            add(
                asked,
                Row {
                    class: "tl-row asked",
                    at: rel(asked - t0),
                    bar: Some(bar("tl-bar asked", asked, decided)),
                    wait: None,
                    text,
                    title: None,
                },
            );
        }
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
        RunStatus::AwaitingApproval => "waiting for approval",
        RunStatus::Completed => "completed",
        RunStatus::Failed => "failed",
        RunStatus::Cancelled => "stopped",
    };
    Drawn {
        head: format!(
            "Started by {}{}{queued} · {} · {state}",
            started_by(run, auto_retry, this_tab),
            d.instance
                .as_ref()
                .map_or_else(String::new, |i| format!(" on instance {i}")),
            took(end - t0)
        ),
        rows: rows.into_iter().map(|(_, r)| r).collect(),
    }
}

/// `n` hundredths of a percent, as CSS reads it: `12.34%`.
pub(super) fn percent(n: u32) -> String {
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
