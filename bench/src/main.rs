//! `mulligan-bench` (issue #7): what Mulligan adds to a provider stream, measured against
//! the same client reading the provider directly, in the same run.
//!
//! B1 relay overhead, B2 concurrency, B3 cancel latency, B4 "no quota for 50 minutes",
//! B5 WASM bundle size, B6 added latency per tool-call step of an agent turn. The provider is a fast fake on loopback ([`fake`]); the server is a
//! real Mulligan (SQLite, persistence on) run as a child process of this binary ([`client`]),
//! so its RSS and CPU are its own. `--smoke` runs each benchmark once at small size and
//! checks correctness only; any correctness failure exits 1.
mod benches;
mod client;
mod fake;

use benches::CancelWhile;
use clap::Parser;
use client::Server;
use fake::Fake;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

pub type R<T> = Result<T, String>;

#[derive(Parser, Debug)]
#[command(
    name = "mulligan-bench",
    about = "Mulligan's benchmarks (B1–B6), against the direct stream"
)]
struct Opts {
    /// Each benchmark once at small size; correctness checks only, no timing verdicts.
    #[arg(long)]
    smoke: bool,
    /// B1 rounds (medians are taken), after one warm-up round.
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// B1 deltas in the stream (sent as fast as possible).
    #[arg(long, default_value_t = 2000)]
    b1_deltas: usize,
    /// B2 concurrent sessions; a list runs each size, e.g. `--sessions 100,1000`.
    #[arg(long, value_delimiter = ',', default_value = "100")]
    sessions: Vec<usize>,
    /// B2 rounds per size (medians are taken).
    #[arg(long, default_value_t = 3)]
    b2_runs: usize,
    /// B2 deltas per stream.
    #[arg(long, default_value_t = 200)]
    b2_deltas: usize,
    /// B2 milliseconds between two deltas.
    #[arg(long, default_value_t = 50)]
    b2_interval_ms: u64,
    /// B3 cancels of each kind (p99 is taken).
    #[arg(long, default_value_t = 50)]
    cancels: usize,
    /// B4: how long provider requests are counted after the post, in seconds.
    #[arg(long, default_value_t = 60)]
    b4_wait_secs: u64,
    /// B5: where the release build's `.wasm` is (default: <workspace>/target/site/pkg).
    #[arg(long)]
    site_pkg: Option<PathBuf>,
    /// B6 turns in a row on one session (each: a tool-call step, a built-in call, a reply).
    #[arg(long, default_value_t = 50)]
    b6_turns: usize,
    /// B6 concurrent variant: this many sessions at once, each running `--b6-turns` turns.
    #[arg(long, default_value_t = 20)]
    b6_sessions: usize,
    /// Run only these benchmarks, e.g. `--only b1,b3`.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
}

impl Opts {
    fn smoke_sizes(mut self) -> Opts {
        self.runs = 1;
        self.b1_deltas = 200;
        self.sessions = vec![10];
        self.b2_runs = 1;
        self.b2_deltas = 20;
        self.b2_interval_ms = 5;
        self.cancels = 3;
        self.b4_wait_secs = 2;
        self.b6_turns = 2;
        self.b6_sessions = 2;
        self
    }

    fn wants(&self, b: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|o| o.eq_ignore_ascii_case(b))
    }
}

fn main() -> ExitCode {
    if std::env::var_os(client::CHILD_ENV).is_some() {
        return client::serve_child();
    }
    let mut opts = Opts::parse();
    if opts.smoke {
        opts = opts.smoke_sizes();
    }
    let rt = tokio::runtime::Runtime::new().expect("the tokio runtime starts");
    rt.block_on(run(opts))
}

/// One row of the table.
struct Row {
    bench: String,
    metric: String,
    direct: String,
    mulligan: String,
    vs: String,
    target: String,
    verdict: String,
}

struct Table {
    rows: Vec<Row>,
    failures: Vec<String>,
    smoke: bool,
}

impl Table {
    #[allow(clippy::too_many_arguments)]
    fn row(
        &mut self,
        bench: &str,
        metric: &str,
        direct: String,
        mulligan: String,
        vs: String,
        target: &str,
        met: Option<bool>,
    ) {
        let verdict = match met {
            None => "—".to_string(),
            Some(_) if self.smoke => "(smoke)".to_string(),
            Some(true) => "met".to_string(),
            Some(false) => "**missed**".to_string(),
        };
        self.rows.push(Row {
            bench: bench.into(),
            metric: metric.into(),
            direct,
            mulligan,
            vs,
            target: target.into(),
            verdict,
        });
        // Progress on stderr while the rest runs.
        let r = self.rows.last().unwrap();
        eprintln!(
            "[bench] {} {}: direct {} · mulligan {} · {} · {}",
            r.bench, r.metric, r.direct, r.mulligan, r.vs, r.verdict
        );
    }

    fn fail(&mut self, bench: &str, e: String) {
        eprintln!("[bench] {bench}: CORRECTNESS FAILURE: {e}");
        self.rows.push(Row {
            bench: bench.into(),
            metric: "correctness".into(),
            direct: "".into(),
            mulligan: e.clone(),
            vs: "".into(),
            target: "".into(),
            verdict: "**FAILED**".into(),
        });
        self.failures.push(format!("{bench}: {e}"));
    }

    fn print(&self) {
        println!("| bench | metric | direct | mulligan | vs direct | target | verdict |");
        println!("|---|---|---|---|---|---|---|");
        for r in &self.rows {
            println!(
                "| {} | {} | {} | {} | {} | {} | {} |",
                r.bench, r.metric, r.direct, r.mulligan, r.vs, r.target, r.verdict
            );
        }
    }
}

async fn run(opts: Opts) -> ExitCode {
    let mut t = Table {
        rows: Vec::new(),
        failures: Vec::new(),
        smoke: opts.smoke,
    };
    let fake = match Fake::start().await {
        Ok(f) => Arc::new(f),
        Err(e) => {
            eprintln!("the fake provider cannot start: {e}");
            return ExitCode::FAILURE;
        }
    };
    if opts.wants("b1") {
        if let Err(e) = b1(&opts, &fake, &mut t).await {
            t.fail("B1", e);
        }
    }
    if opts.wants("b2") {
        for &n in &opts.sessions {
            if let Err(e) = b2(&opts, &fake, n, &mut t).await {
                t.fail(&format!("B2 ×{n}"), e);
            }
        }
    }
    if opts.wants("b3") || opts.wants("b4") {
        match Server::start(&fake.url, &[]).await {
            Err(e) => t.fail("B3/B4", e),
            Ok(server) => {
                if opts.wants("b3") {
                    for what in [CancelWhile::Streaming, CancelWhile::Tier1Sleep] {
                        if let Err(e) = b3(&opts, &server, what, &mut t).await {
                            t.fail("B3", e);
                        }
                    }
                }
                if opts.wants("b4") {
                    if let Err(e) = b4(&opts, &server, &fake, &mut t).await {
                        t.fail("B4", e);
                    }
                }
                server.stop().await;
            }
        }
    }
    if opts.wants("b5") {
        if let Err(e) = b5(&opts, &mut t) {
            t.fail("B5", e);
        }
    }
    if opts.wants("b6") {
        if let Err(e) = b6(&opts, &fake, &mut t).await {
            t.fail("B6", e);
        }
    }
    println!();
    t.print();
    if t.failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        eprintln!("\n{} correctness failure(s):", t.failures.len());
        for f in &t.failures {
            eprintln!("  {f}");
        }
        ExitCode::FAILURE
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

/// Nearest-rank percentile.
fn percentile<T: Copy + Ord>(v: &mut [T], p: f64) -> Option<T> {
    if v.is_empty() {
        return None;
    }
    v.sort_unstable();
    let rank = ((p / 100.0) * v.len() as f64).ceil().max(1.0) as usize;
    Some(v[rank.min(v.len()) - 1])
}

async fn b1(opts: &Opts, fake: &Fake, t: &mut Table) -> R<()> {
    let server = Server::start(&fake.url, &[]).await?;
    let result = async {
        let n = opts.b1_deltas;
        benches::b1(&server, fake, n).await?; // warm-up: connections, caches
        let mut rounds = Vec::new();
        for _ in 0..opts.runs.max(1) {
            rounds.push(benches::b1(&server, fake, n).await?);
        }
        Ok::<_, String>(rounds)
    }
    .await;
    server.stop().await;
    let rounds = result?;
    let col = |f: &dyn Fn(&benches::B1) -> f64| median(rounds.iter().map(f).collect());
    let d_first = col(&|r| ms(r.direct.first()));
    let m_first = col(&|r| ms(r.relay.first()));
    let added_first = col(&|r| ms(r.relay.first()) - ms(r.direct.first()));
    let d_sent = col(&|r| ms(r.direct.until_provider_sent()));
    let m_sent = col(&|r| ms(r.relay.until_provider_sent()));
    let d_total = col(&|r| ms(r.direct.total()));
    let m_total = col(&|r| ms(r.relay.total()));
    let ratio = col(&|r| r.relay.total().as_secs_f64() / r.direct.total().as_secs_f64());
    let resumes: u32 = rounds.iter().map(|r| r.relay.reconnects).sum();
    let runs = rounds.len();
    t.row(
        "B1 relay",
        &format!("first delta, median of {runs}"),
        format!("{d_first:.2} ms"),
        format!("{m_first:.2} ms"),
        format!("+{added_first:.2} ms"),
        "≤ direct + 3 ms",
        Some(added_first <= 3.0),
    );
    t.row(
        "B1 relay",
        "first delta: until the provider sends it · then to the client",
        format!("{d_sent:.2} ms · {:.2} ms", d_first - d_sent),
        format!("{m_sent:.2} ms · {:.2} ms", m_first - m_sent),
        format!(
            "+{:.2} ms · +{:.2} ms",
            m_sent - d_sent,
            (m_first - m_sent) - (d_first - d_sent)
        ),
        "(breakdown)",
        None,
    );
    t.row(
        "B1 relay",
        &format!("last of {} deltas, median of {runs}", opts.b1_deltas),
        format!("{d_total:.1} ms"),
        format!("{m_total:.1} ms"),
        format!("{ratio:.2}×"),
        "≤ 3× direct",
        Some(ratio <= 3.0),
    );
    t.row(
        "B1 relay",
        "deltas lost / reordered (checked)",
        "0".into(),
        format!("0 ({resumes} SSE resumes)"),
        "".into(),
        "0",
        Some(true),
    );
    Ok(())
}

async fn b2(opts: &Opts, fake: &Fake, sessions: usize, t: &mut Table) -> R<()> {
    let server = Arc::new(Server::start(&fake.url, &[]).await?);
    let http = server.http.clone();
    let mut rounds = Vec::new();
    let mut failure = None;
    for _ in 0..opts.b2_runs.max(1) {
        let direct =
            benches::b2_direct(&http, fake, sessions, opts.b2_deltas, opts.b2_interval_ms).await;
        let relay = benches::b2_relay(&server, sessions, opts.b2_deltas, opts.b2_interval_ms).await;
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
        None => match benches::run_starts(&server, sessions).await {
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
    let col = |f: &dyn Fn(&(benches::B2Side, benches::B2Relay)) -> f64| {
        median(rounds.iter().map(f).collect())
    };
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
        format!("+{:.0} ms", m_lf - d_lf),
        "(breakdown)",
        None,
    );
    t.row(
        &bench,
        "p99 transit per delta (provider write → client)",
        format!("{d_p99:.2} ms"),
        format!("{m_p99:.2} ms"),
        format!("+{added:.2} ms"),
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
    let starts_cpu = per_start.as_secs_f64() * sessions as f64;
    let per_delta_us = col(&|(_, r)| {
        (r.cpu.as_secs_f64() - starts_cpu).max(0.0) * 1e6 / r.side.deltas.max(1) as f64
    });
    t.row(
        &bench,
        "server CPU per relayed delta · per run start",
        "".into(),
        format!(
            "{per_delta_us:.1} µs · {:.2} ms",
            per_start.as_secs_f64() * 1000.0
        ),
        format!("(CPU while streaming − {sessions} starts) ÷ deltas relayed"),
        "≤ 15 µs · ≤ 0.5 ms",
        Some(per_delta_us <= 15.0 && per_start <= Duration::from_micros(500)),
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

async fn b3(opts: &Opts, server: &Server, what: CancelWhile, t: &mut Table) -> R<()> {
    let mut response = Vec::new();
    let mut event = Vec::new();
    for i in 0..opts.cancels.max(1) {
        let c = benches::b3(server, what, i).await?;
        response.push(c.response);
        event.push(c.event);
    }
    let n = response.len();
    let p99r = percentile(&mut response, 99.0).unwrap_or_default();
    let p99e = percentile(&mut event, 99.0).unwrap_or_default();
    let p50r = percentile(&mut response, 50.0).unwrap_or_default();
    let worst = p99r.max(p99e);
    let what = match what {
        CancelWhile::Streaming => "running stream",
        CancelWhile::Tier1Sleep => "Tier 1 sleep (503, Retry-After: 10)",
    };
    t.row(
        "B3 cancel",
        &format!("{what}: p99 of {n} (response · run event)"),
        "".into(),
        format!("{:.1} ms · {:.1} ms", ms(p99r), ms(p99e)),
        format!("p50 {:.1} ms", ms(p50r)),
        "< 100 ms p99",
        Some(worst < Duration::from_millis(100)),
    );
    Ok(())
}

async fn b4(opts: &Opts, server: &Server, fake: &Fake, t: &mut Table) -> R<()> {
    let wait = Duration::from_secs(opts.b4_wait_secs);
    let r = benches::b4(server, fake, wait).await?;
    t.row(
        "B4 quota",
        &format!(
            "429 Retry-After: 3000 → provider requests in {} s",
            opts.b4_wait_secs
        ),
        "".into(),
        format!(
            "requests={} (failed {}, retry after {:.0} min)",
            r.requests,
            r.retry_class,
            r.until_in_s as f64 / 60.0
        ),
        "".into(),
        "= 1",
        Some(r.requests == 1),
    );
    if r.requests != 1 {
        // A second request inside the advised window breaks the contract, not just a target.
        t.failures
            .push(format!("B4: {} provider requests, expected 1", r.requests));
    }
    Ok(())
}

fn b5(opts: &Opts, t: &mut Table) -> R<()> {
    let (dir, label) = match &opts.site_pkg {
        Some(d) => (d.clone(), d.display().to_string()),
        None => (
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/site/pkg"),
            "target/site/pkg".to_string(),
        ),
    };
    match benches::b5(&dir)? {
        None => t.row(
            "B5 wasm",
            &format!("{label}/*.wasm (`cargo leptos build --release`)"),
            "".into(),
            "not built".into(),
            "".into(),
            "≤ 250 KB gzip",
            None,
        ),
        Some(files) => {
            for w in files {
                t.row(
                    "B5 wasm",
                    &format!("{} raw · gzip -6", w.name),
                    "".into(),
                    format!(
                        "{:.0} KB · {:.0} KB",
                        w.raw as f64 / 1000.0,
                        w.gzip as f64 / 1000.0
                    ),
                    "".into(),
                    "≤ 250 KB gzip",
                    Some(w.gzip <= 250_000),
                );
            }
        }
    }
    Ok(())
}

async fn b6(opts: &Opts, fake: &Arc<Fake>, t: &mut Table) -> R<()> {
    let server = Arc::new(Server::start(&fake.url, &[]).await?);
    let turns = opts.b6_turns.max(1);
    let sessions = opts.b6_sessions.max(1);
    let result = async {
        benches::b6(&server, fake, 1, 2, "warm-up").await?; // connections, caches
        let sequential = b6_measured(&server, fake, 1, turns, "seq").await?;
        let concurrent = b6_measured(&server, fake, sessions, turns, "conc").await?;
        Ok::<_, String>((sequential, concurrent))
    }
    .await;
    if let Ok(server) = Arc::try_unwrap(server) {
        server.stop().await;
    }
    let (sequential, concurrent) = result?;
    b6_rows(t, "B6 tool step", "sequential", &sequential);
    b6_rows(
        t,
        &format!("B6 tool step ×{sessions}"),
        &format!("{sessions} sessions at once"),
        &concurrent,
    );
    Ok(())
}

/// One B6 variant's turns, and what it cost around them.
struct B6Measured {
    turns: Vec<benches::B6Turn>,
    wall: Duration,
    /// Provider requests and new provider connections the fake saw.
    requests: u64,
    connections: u64,
    /// The server's CPU time, and how busy the whole machine was (0..1, all cores).
    server_cpu: Duration,
    machine_busy: f64,
}

async fn b6_measured(
    server: &Arc<Server>,
    fake: &Arc<Fake>,
    sessions: usize,
    turns: usize,
    tag: &str,
) -> R<B6Measured> {
    let model = fake::tool_model(1);
    let (requests, connections) = (fake.requests(&model), fake.connections());
    let cpu = server.usage().cpu;
    let machine = client::machine_jiffies();
    let start = std::time::Instant::now();
    let turns = benches::b6(server, fake, sessions, turns, tag).await?;
    let wall = start.elapsed();
    let machine_after = client::machine_jiffies();
    let busy = machine_after.0.saturating_sub(machine.0) as f64;
    let total = machine_after.1.saturating_sub(machine.1).max(1) as f64;
    Ok(B6Measured {
        turns,
        wall,
        requests: fake.requests(&model).saturating_sub(requests),
        connections: fake.connections().saturating_sub(connections),
        server_cpu: server.usage().cpu.saturating_sub(cpu),
        machine_busy: busy / total,
    })
}

/// B6's rows for one variant.
fn b6_rows(t: &mut Table, bench: &str, how: &str, m: &B6Measured) {
    let turns = &m.turns;
    let n = turns.len();
    let pct = |f: &dyn Fn(&benches::B6Turn) -> i64, p: f64| {
        let mut v: Vec<i64> = turns.iter().map(f).collect();
        percentile(&mut v, p).unwrap_or_default()
    };
    let ms_of = |us: i64| us as f64 / 1000.0;
    let added = |p| ms_of(pct(&|x| x.added_us as i64, p));
    let (p50, p99, max) = (added(50.0), added(99.0), added(100.0));
    t.row(
        bench,
        &format!("added per step, p50 · p99 of {n} turns ({how})"),
        "".into(),
        format!("{p50:.2} ms · {p99:.2} ms"),
        format!("max {max:.2} ms"),
        "≤ 5 ms p99 on SQLite",
        Some(p99 <= 5.0),
    );
    let seg = |f: &dyn Fn(&benches::B6Turn) -> i64| {
        format!(
            "{:.2} ms (p99 {:.2})",
            ms_of(pct(f, 50.0)),
            ms_of(pct(f, 99.0))
        )
    };
    t.row(
        bench,
        "p50: [DONE] → call start event at the client · → call end event · → next request",
        "".into(),
        format!(
            "{} · {} · {}",
            seg(&|x| x.to_start_seen_us as i64),
            seg(&|x| x.start_to_end_seen_us as i64),
            seg(&|x| x.end_seen_to_next_us),
        ),
        format!(
            "tool's own time p50 · p99: {} ms · {} ms (ms resolution)",
            pct(&|x| x.tool_ms, 50.0),
            pct(&|x| x.tool_ms, 99.0)
        ),
        "(breakdown)",
        None,
    );
    t.row(
        bench,
        "turns per s · server CPU per turn · provider requests (new connections)",
        "".into(),
        format!(
            "{:.0}/s · {:.2} ms · {} ({})",
            n as f64 / m.wall.as_secs_f64().max(1e-9),
            ms(m.server_cpu) / n.max(1) as f64,
            m.requests,
            m.connections
        ),
        format!("machine {:.0}% busy", m.machine_busy * 100.0),
        "(breakdown)",
        None,
    );
    t.row(
        bench,
        "turns completed with 2 steps, 1 tool executed (checked)",
        "".into(),
        format!("{n} of {n}"),
        "".into(),
        "all",
        Some(true),
    );
}
