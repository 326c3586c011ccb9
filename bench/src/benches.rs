//! The measurements. Each checks correctness as it goes (an `Err` is a correctness failure)
//! and returns raw timings; `main` takes medians, ratios and percentiles.
use crate::client::{Events, Server, Usage};
use crate::fake::{clock_us, parse_delta, status_model, stream_model, Fake};
use crate::R;
use app::wire::{Event, RunStatus, ToolCallStatus};
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

    /// Records delta number `arrivals.len()` with its text; fails on a gap or a reorder.
    fn delta(&mut self, text: &str, at: Instant) -> R<()> {
        let now = clock_us();
        let k = self.arrivals.len();
        match parse_delta(text) {
            Some((i, sent)) if i == k => {
                self.first_sent_us.get_or_insert(sent);
                self.arrivals.push(at);
                self.transits_us.push(now.saturating_sub(sent));
                Ok(())
            }
            Some((i, _)) => Err(format!("delta {i} arrived where delta {k} was due")),
            None => Err(format!("unexpected delta text {text:?}")),
        }
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
    loop {
        let (e, at) = events.next(EVENT_WAIT).await?;
        match e {
            Event::Delta(d) if d.run_id == rid => {
                let due = trace.arrivals.len() as u64 + 1;
                if d.seq != due {
                    return Err(format!("delta seq {} arrived where {due} was due", d.seq));
                }
                trace.delta(&d.text, at)?;
            }
            Event::Run(r) if r.id == rid && !r.status.is_active() => {
                if r.status != RunStatus::Completed {
                    return Err(format!(
                        "run ended {:?}: {}",
                        r.status,
                        r.error_message.unwrap_or_default()
                    ));
                }
                break;
            }
            _ => {}
        }
    }
    trace.expect_count(n)?;
    trace.reconnects = events.reconnects;
    Ok(trace)
}

// ---- B1 ----

pub struct B1 {
    pub direct: Trace,
    pub relay: Trace,
}

/// One B1 round: the direct stream, then the same stream through Mulligan (fresh session).
pub async fn b1(server: &Server, fake: &Fake, n: usize) -> R<B1> {
    let model = stream_model(n, 0);
    let direct = direct(&server.http, &fake.url, &model, n).await?;
    let sid = server.create_session(&model).await?;
    let mut events = server.events(&sid).await?;
    let relay = relay(server, &mut events, &sid, n).await?;
    Ok(B1 { direct, relay })
}

// ---- B2 ----

pub struct B2Side {
    pub wall: Duration,
    /// When the last stream to start got its first delta, from the common start.
    pub last_first: Duration,
    pub transits_us: Vec<u64>,
    pub deltas: usize,
    pub reconnects: u32,
}

fn side(start: Instant, traces: Vec<Trace>) -> B2Side {
    let end = traces.iter().map(Trace::last_at).max().unwrap_or(start);
    let last_first = traces
        .iter()
        .filter_map(|t| t.arrivals.first())
        .max()
        .map(|a| *a - start)
        .unwrap_or_default();
    B2Side {
        wall: end - start,
        last_first,
        deltas: traces.iter().map(|t| t.arrivals.len()).sum(),
        reconnects: traces.iter().map(|t| t.reconnects).sum(),
        transits_us: traces.into_iter().flat_map(|t| t.transits_us).collect(),
    }
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

/// `sessions` direct streams at once.
pub async fn b2_direct(
    http: &reqwest::Client,
    fake: &Fake,
    sessions: usize,
    n: usize,
    every_ms: u64,
) -> R<B2Side> {
    let model = stream_model(n, every_ms);
    let fake_url = std::sync::Arc::new(fake.url.clone());
    let start = Instant::now();
    let tasks = (0..sessions)
        .map(|_| {
            let http = http.clone();
            let model = model.clone();
            let url = fake_url.clone();
            tokio::spawn(async move { direct(&http, &url, &model, n).await })
        })
        .collect();
    Ok(side(start, all(tasks).await?))
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

pub struct B2Relay {
    pub side: B2Side,
    /// The server's CPU time (user + system) during the timed part.
    pub cpu: Duration,
    /// The server's peak RSS since it started.
    pub peak_rss_kb: u64,
    /// This process's CPU time (client and fake provider) during the timed part.
    pub client_cpu: Duration,
    /// How busy the whole machine was during the timed part (0..1, all cores).
    pub machine_busy: f64,
}

/// `sessions` sessions, each subscribed first (untimed), then all posted at once.
pub async fn b2_relay(
    server: &std::sync::Arc<Server>,
    sessions: usize,
    n: usize,
    every_ms: u64,
) -> R<B2Relay> {
    let model = stream_model(n, every_ms);
    let subscribed: Vec<R<(String, Events)>> = futures::stream::iter(0..sessions)
        .map(|_| async {
            let sid = server.create_session(&model).await?;
            let events = server.events(&sid).await?;
            Ok((sid, events))
        })
        .buffer_unordered(32)
        .collect()
        .await;
    let subscribed = subscribed.into_iter().collect::<R<Vec<_>>>()?;
    let before: Usage = server.usage();
    let client_before = crate::client::usage(std::process::id());
    let machine_before = crate::client::machine_jiffies();
    let start = Instant::now();
    let tasks = subscribed
        .into_iter()
        .map(|(sid, mut events)| {
            let server = server.clone();
            tokio::spawn(async move { relay(&server, &mut events, &sid, n).await })
        })
        .collect();
    let traces = all(tasks).await?;
    let after = server.usage();
    let client_after = crate::client::usage(std::process::id());
    let machine_after = crate::client::machine_jiffies();
    let busy = machine_after.0.saturating_sub(machine_before.0) as f64;
    let total = machine_after.1.saturating_sub(machine_before.1).max(1) as f64;
    Ok(B2Relay {
        side: side(start, traces),
        cpu: after.cpu.saturating_sub(before.cpu),
        peak_rss_kb: after.peak_rss_kb,
        client_cpu: client_after.cpu.saturating_sub(client_before.cpu),
        machine_busy: busy / total,
    })
}

/// Server CPU per run start: `sessions` sessions (subscribed first, untimed) each post one
/// message whose reply is a single delta, all at once. Answers the server's CPU per run, so
/// B2's CPU can be split into run starts and relayed deltas.
pub async fn run_starts(server: &std::sync::Arc<Server>, sessions: usize) -> R<Duration> {
    let model = stream_model(1, 0);
    let subscribed: Vec<R<(String, Events)>> = futures::stream::iter(0..sessions)
        .map(|_| async {
            let sid = server.create_session(&model).await?;
            let events = server.events(&sid).await?;
            Ok((sid, events))
        })
        .buffer_unordered(32)
        .collect()
        .await;
    let subscribed = subscribed.into_iter().collect::<R<Vec<_>>>()?;
    let before = server.usage();
    let tasks = subscribed
        .into_iter()
        .map(|(sid, mut events)| {
            let server = server.clone();
            tokio::spawn(async move { relay(&server, &mut events, &sid, 1).await })
        })
        .collect();
    all(tasks).await?;
    let after = server.usage();
    let n = u32::try_from(sessions.max(1)).unwrap_or(u32::MAX);
    Ok(after.cpu.saturating_sub(before.cpu) / n)
}

// ---- B3 ----

#[derive(Clone, Copy, Debug)]
pub enum CancelWhile {
    /// The run is streaming (a delta has arrived).
    Streaming,
    /// The run is in a Tier 1 sleep (its `attempt` event announced a 10 s wait).
    Tier1Sleep,
}

pub struct CancelTiming {
    /// Until the cancel call's `200 Run{cancelled}`.
    pub response: Duration,
    /// Until the `run` event with status `cancelled`.
    pub event: Duration,
}

/// Starts a run on a fresh session, waits until it is in the state, cancels it. `tag` makes
/// the model new each time, so each 503 is the provider's own answer, not a provider-wide
/// cooldown that an earlier one started.
pub async fn b3(server: &Server, what: CancelWhile, tag: usize) -> R<CancelTiming> {
    let model = match what {
        CancelWhile::Streaming => stream_model(1_000_000, 5),
        CancelWhile::Tier1Sleep => format!("{}-{tag}", status_model(503, 10)),
    };
    let sid = server.create_session(&model).await?;
    let mut events = server.events(&sid).await?;
    let rid = server.post_message(&sid, "go").await?.run_id;
    loop {
        let (e, _) = events.next(EVENT_WAIT).await?;
        match (what, e) {
            (CancelWhile::Streaming, Event::Delta(d)) if d.run_id == rid => break,
            (CancelWhile::Tier1Sleep, Event::Attempt(a)) if a.run_id == rid => {
                if a.retry_in_ms < 9_000 {
                    return Err(format!(
                        "Tier 1 waits {} ms after Retry-After: 10",
                        a.retry_in_ms
                    ));
                }
                break;
            }
            (_, Event::Run(r)) if r.id == rid && !r.status.is_active() => {
                return Err(format!("the run ended {:?} before the cancel", r.status));
            }
            _ => {}
        }
    }
    let t0 = Instant::now();
    let call = async {
        let answer = server.cancel(&sid, &rid).await;
        (answer, Instant::now())
    };
    let event = async {
        loop {
            let (e, at) = events.next(EVENT_WAIT).await?;
            if let Event::Run(r) = e {
                if r.id == rid && !r.status.is_active() {
                    if r.status != RunStatus::Cancelled {
                        return Err(format!("run event says {:?}, not cancelled", r.status));
                    }
                    return Ok(at);
                }
            }
        }
    };
    let ((answer, answered_at), event_at) = tokio::join!(call, event);
    let event_at: Instant = event_at?;
    let (status, body) = answer?;
    if status != 200 || body["status"] != "cancelled" {
        return Err(format!("cancel answered {status} {body}"));
    }
    Ok(CancelTiming {
        response: answered_at - t0,
        event: event_at - t0,
    })
}

// ---- B4 ----

pub struct B4 {
    /// Provider requests from the post to the end of the wait.
    pub requests: u64,
    pub retry_class: app::wire::RetryClass,
    /// `retry_after_until` − now, in seconds, when the run failed.
    pub until_in_s: i64,
}

/// The provider answers 429 with `Retry-After: 3000` (50 minutes); counts its requests
/// during `wait` after the post. The session's auto retry is set to `background`, so a
/// server-side retry, if there is one, is in play too.
pub async fn b4(server: &Server, fake: &Fake, wait: Duration) -> R<B4> {
    let model = status_model(429, 3000);
    let sid = server.create_session(&model).await?;
    let _ = server
        .patch_session(&sid, serde_json::json!({"auto_retry": "background"}))
        .await?;
    let mut events = server.events(&sid).await?;
    let posted = Instant::now();
    let rid = server.post_message(&sid, "go").await?.run_id;
    let run = loop {
        let (e, _) = events.next(EVENT_WAIT).await?;
        if let Event::Run(r) = e {
            if r.id == rid && !r.status.is_active() {
                break r;
            }
        }
    };
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    if run.status != RunStatus::Failed {
        return Err(format!("the run ended {:?}, not failed", run.status));
    }
    let retry = run.retry.ok_or("the failed run has no classification")?;
    let until = retry
        .retry_after_until
        .ok_or("the failed run has no retry_after_until")?;
    if let Some(rest) = wait.checked_sub(posted.elapsed()) {
        tokio::time::sleep(rest).await;
    }
    // The run as stored agrees with the event.
    let stored = server.run(&rid).await?;
    if stored.status != RunStatus::Failed {
        return Err(format!("the stored run is {:?}", stored.status));
    }
    Ok(B4 {
        requests: fake.requests(&model),
        retry_class: retry.retry_class,
        until_in_s: (until - now_ms) / 1000,
    })
}

// ---- B5 ----

pub struct Wasm {
    pub name: String,
    pub raw: u64,
    pub gzip: u64,
}

/// Raw and `gzip -c` (level 6) sizes of the `.wasm` files in `dir`; `None` when not built.
pub fn b5(dir: &std::path::Path) -> R<Option<Vec<Wasm>>> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(None);
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().and_then(|e| e.to_str()) != Some("wasm") {
            continue;
        }
        let raw = entry.metadata().map_err(|e| e.to_string())?.len();
        let gz = std::process::Command::new("gzip")
            .arg("-c")
            .arg(&path)
            .output()
            .map_err(|e| format!("gzip: {e}"))?;
        if !gz.status.success() {
            return Err(format!("gzip {}: {}", path.display(), gz.status));
        }
        out.push(Wasm {
            name: entry.file_name().to_string_lossy().into_owned(),
            raw,
            gzip: gz.stdout.len() as u64,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok((!out.is_empty()).then_some(out))
}

// ---- B6 ----

/// One agent turn of B6 (two model steps, one built-in tool call between them).
pub struct B6Turn {
    /// The fake's `[DONE]` of the tool-call answer → the follow-up request's arrival (µs).
    pub added_us: u64,
    /// `[DONE]` → the call's start event at this client (µs; SSE transit included).
    pub to_start_seen_us: u64,
    /// The call's start event → its end event, both at this client (µs).
    pub start_to_end_seen_us: u64,
    /// The call's end event at this client → the follow-up's arrival (µs; negative when the
    /// request came first).
    pub end_seen_to_next_us: i64,
    /// The call's own `finished_at − started_at` (ms, as recorded).
    pub tool_ms: i64,
}

/// B6: `sessions` sessions at once, each subscribed first, then each running `turns` turns one
/// after the other. Every turn must complete with 2 steps and 1 tool executed.
pub async fn b6(
    server: &std::sync::Arc<Server>,
    fake: &std::sync::Arc<Fake>,
    sessions: usize,
    turns: usize,
    tag: &str,
) -> R<Vec<B6Turn>> {
    let model = crate::fake::tool_model(1);
    let subscribed: Vec<R<(String, Events)>> = futures::stream::iter(0..sessions)
        .map(|_| async {
            let sid = server.create_session(&model).await?;
            let events = server.events(&sid).await?;
            Ok((sid, events))
        })
        .buffer_unordered(32)
        .collect()
        .await;
    let subscribed = subscribed.into_iter().collect::<R<Vec<_>>>()?;
    let tasks = subscribed
        .into_iter()
        .enumerate()
        .map(|(w, (sid, mut events))| {
            let (server, fake) = (server.clone(), fake.clone());
            let tag = tag.to_string();
            tokio::spawn(async move {
                let mut out = Vec::with_capacity(turns);
                for t in 0..turns {
                    let key = format!("b6 {tag} s{w} t{t}");
                    out.push(b6_turn(&server, &fake, &mut events, &sid, &key).await?);
                }
                Ok(out)
            })
        })
        .collect();
    Ok(all(tasks).await?.into_iter().flatten().collect())
}

/// Posts `key` and follows the turn to its end; checks it, and takes its timings.
async fn b6_turn(
    server: &Server,
    fake: &Fake,
    events: &mut Events,
    sid: &str,
    key: &str,
) -> R<B6Turn> {
    let rid = server.post_message(sid, key).await?.run_id;
    let mut texts: Vec<(u32, String)> = Vec::new();
    let mut start_seen = None;
    let mut end_seen = None;
    let mut tool_ms = 0;
    loop {
        let (e, _) = events.next(EVENT_WAIT).await?;
        let now = clock_us();
        match e {
            Event::Delta(d) if d.run_id == rid => texts.push((d.step, d.text)),
            Event::ToolCall(c) if c.run_id == rid => {
                let call = c.call;
                if call.server != "mulligan" || call.tool != "list_sessions" || call.step != 1 {
                    return Err(format!(
                        "unexpected call {}/{} at step {}",
                        call.server, call.tool, call.step
                    ));
                }
                match call.status {
                    ToolCallStatus::Running if start_seen.is_none() => start_seen = Some(now),
                    ToolCallStatus::Ok if end_seen.is_none() => {
                        end_seen = Some(now);
                        let end = call.finished_at.ok_or("an ended call has no finished_at")?;
                        tool_ms = end - call.started_at;
                    }
                    other => return Err(format!("unexpected tool_call event ({other:?})")),
                }
            }
            Event::Run(r) if r.id == rid && !r.status.is_active() => {
                if r.status != RunStatus::Completed {
                    return Err(format!(
                        "run ended {:?}: {}",
                        r.status,
                        r.error_message.unwrap_or_default()
                    ));
                }
                break;
            }
            _ => {}
        }
    }
    let want = [
        (1, crate::fake::TOOL_ASK_TEXT.to_string()),
        (2, crate::fake::TOOL_REPLY_TEXT.to_string()),
    ];
    if texts != want {
        return Err(format!("deltas {texts:?}, expected {want:?}"));
    }
    let run = server.run(&rid).await?;
    if run.steps != 2 || run.tools_executed != 1 {
        return Err(format!(
            "run has {} steps and {} tools executed, expected 2 and 1",
            run.steps, run.tools_executed
        ));
    }
    let seen = fake.tool_step(key).ok_or("the fake never saw this turn")?;
    if seen.asks != 1 || seen.follow_ups != 1 {
        return Err(format!(
            "the fake saw {} tool-call requests and {} follow-ups, expected 1 and 1",
            seen.asks, seen.follow_ups
        ));
    }
    let (Some(done), Some(next), Some(start_seen), Some(end_seen)) =
        (seen.asked_done_us, seen.follow_up_us, start_seen, end_seen)
    else {
        return Err("a turn's step or call went unseen".into());
    };
    Ok(B6Turn {
        added_us: next.saturating_sub(done),
        to_start_seen_us: start_seen.saturating_sub(done),
        start_to_end_seen_us: end_seen.saturating_sub(start_seen),
        end_seen_to_next_us: next as i64 - end_seen as i64,
        tool_ms,
    })
}
