//! B2 concurrency: many streams at once, directly and through Mulligan, and the server's
//! cost per run start.
use super::{all, direct, relay, Trace};
use crate::client::{Events, Server, Usage};
use crate::fake::{stream_model, Fake};
use crate::R;
use futures::StreamExt;
use std::time::{Duration, Instant};

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
