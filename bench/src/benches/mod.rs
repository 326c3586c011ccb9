//! What the benchmarks share: a stream as a client saw it, read from the provider directly
//! or through Mulligan. Each measurement checks correctness as it goes (an `Err` is a
//! correctness failure) and returns raw timings; each benchmark's `run` takes medians, ratios and percentiles into
//! the table.
pub mod b1;
pub mod b10;
pub mod b10_parse;
pub mod b2;
pub mod b3;
pub mod b4;
pub mod b5;
pub mod b6;
pub mod b7;
pub mod b8;
pub mod b9;

use crate::client::{Events, Server};
use crate::fake::{clock_us, parse_delta};
use crate::R;
use app::wire::{Event, RunStatus};
use eventsource_stream::Eventsource;
use futures::StreamExt;
use std::time::{Duration, Instant};

/// How long any one event may take before a benchmark gives up.
const EVENT_WAIT: Duration = Duration::from_secs(60);

/// One stream as a client saw it: when it asked, when each delta arrived, each delta's
/// transit time from the fake provider's write to this client (µs).
pub struct Trace {
    pub t0: Instant,
    /// `t0` on [`clock_us`].
    pub t0_us: u64,
    /// When the provider sent the first delta, on [`clock_us`].
    pub first_sent_us: Option<u64>,
    pub arrivals: Vec<Instant>,
    pub transits_us: Vec<u64>,
    pub reconnects: u32,
}

impl Trace {
    fn new(t0: Instant) -> Trace {
        Trace {
            t0,
            t0_us: clock_us(),
            first_sent_us: None,
            arrivals: Vec::new(),
            transits_us: Vec::new(),
            reconnects: 0,
        }
    }

    /// Records the provider's deltas that one of Mulligan's carries (several, when they came
    /// within its delta window: `k@t ` each), numbered from `arrivals.len()`; fails on a gap
    /// or a reorder.
    fn delta(&mut self, text: &str, at: Instant) -> R<()> {
        let now = clock_us();
        for piece in text.split_inclusive(' ') {
            let k = self.arrivals.len();
            match parse_delta(piece) {
                Some((i, sent)) if i == k => {
                    self.first_sent_us.get_or_insert(sent);
                    self.arrivals.push(at);
                    self.transits_us.push(now.saturating_sub(sent));
                }
                Some((i, _)) => return Err(format!("delta {i} arrived where delta {k} was due")),
                None => return Err(format!("unexpected delta text {piece:?}")),
            }
        }
        Ok(())
    }

    fn expect_count(&self, n: usize) -> R<()> {
        if self.arrivals.len() != n {
            return Err(format!("{} of {n} deltas arrived", self.arrivals.len()));
        }
        Ok(())
    }

    pub fn first(&self) -> Duration {
        self.arrivals
            .first()
            .map(|a| *a - self.t0)
            .unwrap_or_default()
    }

    /// From `t0` until the provider sent the first delta (asking it, and its answer).
    pub fn until_provider_sent(&self) -> Duration {
        Duration::from_micros(
            self.first_sent_us
                .unwrap_or(self.t0_us)
                .saturating_sub(self.t0_us),
        )
    }

    pub fn last_at(&self) -> Instant {
        self.arrivals.last().copied().unwrap_or(self.t0)
    }

    pub fn total(&self) -> Duration {
        self.last_at() - self.t0
    }
}

/// Through Mulligan: posts the message on a session whose events `events` already follows,
/// and reads the run's deltas (checked against `seq`) until the run completes.
pub async fn relay(server: &Server, events: &mut Events, sid: &str, n: usize) -> R<Trace> {
    let mut trace = Trace::new(Instant::now());
    let receipt = server.post_message(sid, "go").await?;
    let rid = receipt.run_id;
    let mut seq = 0;
    loop {
        let (e, at) = events.next(EVENT_WAIT).await?;
        match e {
            Event::Delta(d) if d.run_id == rid => {
                let due = seq + 1;
                if d.seq != due {
                    return Err(format!("delta seq {} arrived where {due} was due", d.seq));
                }
                seq = d.seq;
                trace.delta(&d.text, at)?;
            }
            Event::Run(r) if r.id == rid && !r.status.is_active() => {
                completed(&r)?;
                break;
            }
            _ => {}
        }
    }
    trace.expect_count(n)?;
    trace.reconnects = events.reconnects;
    Ok(trace)
}

/// Ok when an ended run `completed`; else how it ended, as the benchmark's failure.
fn completed(r: &app::wire::Run) -> R<()> {
    if r.status == RunStatus::Completed {
        return Ok(());
    }
    Err(format!(
        "run ended {:?}: {}",
        r.status,
        r.error_message.as_deref().unwrap_or_default()
    ))
}

/// `sessions` new sessions on `model`, each already subscribed to its events (untimed set-up,
/// 32 at a time).
async fn subscribed(server: &Server, model: &str, sessions: usize) -> R<Vec<(String, Events)>> {
    let subscribed: Vec<R<(String, Events)>> = futures::stream::iter(0..sessions)
        .map(|_| async {
            let sid = server.create_session(model).await?;
            let events = server.events(&sid).await?;
            Ok((sid, events))
        })
        .buffer_unordered(32)
        .collect()
        .await;
    subscribed.into_iter().collect()
}

async fn all<T: Send + 'static>(tasks: Vec<tokio::task::JoinHandle<R<T>>>) -> R<Vec<T>> {
    let mut out = Vec::with_capacity(tasks.len());
    let mut first_err = None;
    for t in tasks {
        match t.await {
            Ok(Ok(v)) => out.push(v),
            Ok(Err(e)) => {
                first_err.get_or_insert(e);
            }
            Err(e) => {
                first_err.get_or_insert(format!("task: {e}"));
            }
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// The same client reading the fake provider's stream itself (the request Mulligan makes).
pub async fn direct(http: &reqwest::Client, url: &str, model: &str, n: usize) -> R<Trace> {
    let body = serde_json::json!({
        "model": model,
        "messages": [{"role": "user", "content": "go"}],
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    let mut trace = Trace::new(Instant::now());
    let resp = http
        .post(format!("{url}/chat/completions"))
        .bearer_auth("sk-bench")
        .json(&body)
        .send()
        .await
        .map_err(|e| format!("direct request: {e}"))?;
    if !resp.status().is_success() {
        return Err(format!("direct request: {}", resp.status()));
    }
    let mut events = resp.bytes_stream().eventsource();
    loop {
        let ev = tokio::time::timeout(EVENT_WAIT, events.next())
            .await
            .map_err(|_| "the direct stream stalled")?
            .ok_or("the direct stream ended before [DONE]")?
            .map_err(|e| format!("direct stream: {e}"))?;
        let at = Instant::now();
        if ev.data.trim() == "[DONE]" {
            break;
        }
        let v: serde_json::Value =
            serde_json::from_str(&ev.data).map_err(|e| format!("direct chunk: {e}"))?;
        if let Some(text) = v
            .pointer("/choices/0/delta/content")
            .and_then(|t| t.as_str())
        {
            trace.delta(text, at)?;
        }
    }
    trace.expect_count(n)?;
    Ok(trace)
}
