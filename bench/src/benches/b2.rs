//! B2 concurrency: many streams at once, directly and through Mulligan, and the server's
//! cost per run start.
use super::{all, direct, relay, Trace};
use crate::client::{Server, Usage};
use crate::fake::{stream_model, Fake};
use crate::report::{median, ms, percentile, Table};
use crate::{Opts, R};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Runs B2 at `sessions` streams (`--b2-runs` rounds, then the run starts apart) and puts
/// its medians in the table.
pub async fn run(opts: &Opts, fake: &Fake, sessions: usize, t: &mut Table) -> R<()> {
    let server = Arc::new(Server::start(&fake.url, &[]).await?);
    let http = server.http.clone();
    let mut rounds = Vec::new();
    let mut failure = None;
    for _ in 0..opts.b2_runs.max(1) {
        let direct = b2_direct(&http, fake, sessions, opts.b2_deltas, opts.b2_interval_ms).await;
        let relay = b2_relay(&server, sessions, opts.b2_deltas, opts.b2_interval_ms).await;
        match (direct, relay) {
            (Ok(d), Ok(r)) => rounds.push((d, r)),
            (Err(e), _) | (_, Err(e)) => {
                failure = Some(e);
                break;
            }
        }
    }
    // Run starts apart: the same number of one-delta runs, so B2's CPU splits into starts
    // and relayed deltas.
    let per_start = match failure {
        None => match run_starts(&server, sessions).await {
            Ok(d) => Some(d),
            Err(e) => {
                failure = Some(e);
                None
            }
        },
        Some(_) => None,
    };
    if let Ok(server) = Arc::try_unwrap(server) {
        server.stop().await;
    }
    if let Some(e) = failure {
        return Err(e);
    }
    let per_start = per_start.unwrap_or_default();
    let runs = rounds.len();
    let bench = format!("B2 ×{sessions}");
    let col = |f: &dyn Fn(&(B2Side, B2Relay)) -> f64| median(rounds.iter().map(f).collect());
    let p99 = |v: &[u64]| {
        let mut v = v.to_vec();
        percentile(&mut v, 99.0).unwrap_or(0) as f64 / 1000.0
    };
    let d_wall = col(&|(d, _)| d.wall.as_secs_f64());
    let m_wall = col(&|(_, r)| r.side.wall.as_secs_f64());
    let ratio = col(&|(d, r)| r.side.wall.as_secs_f64() / d.wall.as_secs_f64());
    let d_p99 = col(&|(d, _)| p99(&d.transits_us));
    let m_p99 = col(&|(_, r)| p99(&r.side.transits_us));
    let added = col(&|(d, r)| p99(&r.side.transits_us) - p99(&d.transits_us));
    let cpu = col(&|(_, r)| r.cpu.as_secs_f64());
    let client_cpu = col(&|(_, r)| r.client_cpu.as_secs_f64());
    let busy = col(&|(_, r)| r.machine_busy * 100.0);
    let rss = rounds.iter().map(|(_, r)| r.peak_rss_kb).max().unwrap_or(0) as f64 / 1024.0;
    let deltas: usize = rounds.iter().map(|(_, r)| r.side.deltas).sum();
    let resumes: u32 = rounds.iter().map(|(_, r)| r.side.reconnects).sum();
    let per = format!(
        "{} deltas at {} ms, median of {runs}",
        opts.b2_deltas, opts.b2_interval_ms
    );
    t.row(
        &bench,
        &format!("wall time ({per})"),
        format!("{d_wall:.2} s"),
        format!("{m_wall:.2} s"),
        format!("{ratio:.3}×"),
        "≤ 1.05× direct",
        Some(ratio <= 1.05),
    );
    let d_lf = col(&|(d, _)| ms(d.last_first));
    let m_lf = col(&|(_, r)| ms(r.side.last_first));
    t.row(
        &bench,
        "first delta of the last stream to start",
        format!("{d_lf:.0} ms"),
        format!("{m_lf:.0} ms"),
        format!("{:+.0} ms", m_lf - d_lf),
        "(breakdown)",
        None,
    );
    t.row(
        &bench,
        "p99 transit per delta (provider write → client)",
        format!("{d_p99:.2} ms"),
        format!("{m_p99:.2} ms"),
        format!("{added:+.2} ms"),
        "added ≤ 20 ms",
        Some(added <= 20.0),
    );
    t.row(
        &bench,
        "server peak RSS (per open stream) · server CPU while streaming",
        "".into(),
        format!(
            "{rss:.0} MiB ({per_stream_kib:.0} KiB) · {cpu:.2} s",
            per_stream_kib = rss * 1024.0 / sessions.max(1) as f64
        ),
        format!("client+fake CPU {client_cpu:.2} s; machine {busy:.0}% busy"),
        "≤ 150 KiB per stream",
        Some(rss * 1024.0 / sessions.max(1) as f64 <= 150.0),
    );
    // CPU per relayed delta: streaming CPU less the run starts' share (measured apart).
    let starts_cpu = per_start.cpu.as_secs_f64() * sessions as f64;
    let per_delta_us = col(&|(_, r)| {
        (r.cpu.as_secs_f64() - starts_cpu).max(0.0) * 1e6 / r.side.deltas.max(1) as f64
    });
    t.row(
        &bench,
        "server CPU per relayed delta · per run start",
        "".into(),
        format!(
            "{per_delta_us:.1} µs · {:.2} ms ({:.0} thread switches)",
            per_start.cpu.as_secs_f64() * 1000.0,
            per_start.switches
        ),
        format!("(CPU while streaming − {sessions} starts) ÷ deltas relayed"),
        "≤ 15 µs · ≤ 0.5 ms",
        Some(per_delta_us <= 15.0 && per_start.cpu <= Duration::from_micros(500)),
    );
    t.row(
        &bench,
        "deltas lost / reordered (checked)",
        "0".into(),
        format!("0 of {deltas} ({resumes} SSE resumes)"),
        "".into(),
        "0",
        Some(true),
    );
    Ok(())
}

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
    let subscribed = super::subscribed(server, &model, sessions).await?;
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
pub async fn run_starts(server: &std::sync::Arc<Server>, sessions: usize) -> R<StartCost> {
    let model = stream_model(1, 0);
    let subscribed = super::subscribed(server, &model, sessions).await?;
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
    Ok(StartCost {
        cpu: after.cpu.saturating_sub(before.cpu) / n,
        switches: after.switches.saturating_sub(before.switches) as f64 / f64::from(n),
    })
}

/// What one one-delta run costs the server: CPU, and its threads' context switches.
#[derive(Clone, Copy, Debug, Default)]
pub struct StartCost {
    pub cpu: Duration,
    pub switches: f64,
}
