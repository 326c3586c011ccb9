//! `mulligan-bench` (issue #7): what Mulligan adds to a provider stream, measured against
//! the same client reading the provider directly, in the same run.
//!
//! B1 relay overhead, B2 concurrency, B3 cancel latency, B4 "no quota for 50 minutes",
//! B5 WASM bundle size, B6 added latency per tool-call step of an agent turn, B7 two
//! instances on PostgreSQL (with `--b7-postgres`), B8 parking, B9 runs waiting for
//! approval (on PostgreSQL too with `--b7-postgres`), B10 parse (the Markdown
//! parser on adversarial replies, natively; `--only b10-parse`), B10 page (the page's main
//! thread per streamed delta in Debian's chromium; `--only b10`). The provider is a fast fake
//! on loopback ([`fake`]); the server is a real Mulligan (SQLite, persistence on) run as a
//! child process of this binary ([`client`]), so its RSS and CPU are its own. `--smoke` runs
//! each benchmark once at small size and checks correctness only; any correctness failure
//! exits 1.
mod benches;
mod client;
mod fake;
mod report;

use benches::b3::CancelWhile;
use clap::Parser;
use client::Server;
use fake::Fake;
use report::Table;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

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
    /// B7: the PostgreSQL server to run two instances on (a fresh database per load), e.g.
    /// `postgres://127.0.0.1:5432/test`; without it B7 is skipped.
    #[arg(long)]
    b7_postgres: Option<String>,
    /// B7 session counts; a list runs each size, e.g. `--b7-sessions 80,300,1000`. Each
    /// stream is `--b2-deltas` deltas `--b2-interval-ms` apart.
    #[arg(long, value_delimiter = ',', default_value = "80")]
    b7_sessions: Vec<usize>,
    /// B8 sessions parked on one overloaded model.
    #[arg(long, default_value_t = 200)]
    b8_sessions: usize,
    /// B8's `MULLIGAN_RELEASE_PER_S` (the server's default).
    #[arg(long, default_value_t = 2)]
    b8_release_per_s: u32,
    /// B9 runs waiting for approval at once (with `--b7-postgres`, on PostgreSQL too).
    #[arg(long, default_value_t = 1000)]
    b9_runs: usize,
    /// B10 parse: how many times each adversarial Markdown reply is parsed (the median is
    /// taken).
    #[arg(long, default_value_t = 5)]
    b10_parse_runs: usize,
    /// B10 page: the Markdown replies' sizes, in deltas of 8 bytes 1 ms apart.
    #[arg(long, value_delimiter = ',', default_value = "1000,8000,24000")]
    b10_deltas: Vec<usize>,
    /// B10 page: the long session's messages before its measured turn (0: none).
    #[arg(long, default_value_t = 2000)]
    b10_long_messages: usize,
    /// B10 page: sessions made before the last measure, to measure with a long list (0: none).
    #[arg(long, default_value_t = 50_000)]
    b10_sessions: usize,
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
        self.b8_sessions = 6;
        self.b8_release_per_s = 10;
        self.b9_runs = 20;
        self.b10_parse_runs = 1;
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
        if let Err(e) = benches::b1::run(&opts, &fake, &mut t).await {
            t.fail("B1", e);
        }
    }
    if opts.wants("b2") {
        for &n in &opts.sessions {
            if let Err(e) = benches::b2::run(&opts, &fake, n, &mut t).await {
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
                        if let Err(e) = benches::b3::run(&opts, &server, what, &mut t).await {
                            t.fail("B3", e);
                        }
                    }
                }
                if opts.wants("b4") {
                    if let Err(e) = benches::b4::run(&opts, &server, &fake, &mut t).await {
                        t.fail("B4", e);
                    }
                }
                server.stop().await;
            }
        }
    }
    if opts.wants("b5") {
        if let Err(e) = benches::b5::run(&opts, &mut t) {
            t.fail("B5", e);
        }
    }
    if opts.wants("b6") {
        if let Err(e) = benches::b6::run(&opts, &fake, &mut t).await {
            t.fail("B6", e);
        }
    }
    if opts.wants("b7") {
        match &opts.b7_postgres {
            Some(base) => {
                for &n in &opts.b7_sessions {
                    if let Err(e) = benches::b7::run(&opts, &fake, base, n, &mut t).await {
                        t.fail(&format!("B7 ×{n}"), e);
                    }
                }
            }
            None => eprintln!("B7 skipped: give --b7-postgres <url> to run it"),
        }
    }
    if opts.wants("b8") {
        if let Err(e) = benches::b8::run(&opts, &fake, &mut t).await {
            t.fail("B8", e);
        }
    }
    if opts.wants("b9") {
        if let Err(e) = benches::b9::run(&opts, &fake, &mut t).await {
            t.fail("B9", e);
        }
    }
    // (Not in `--smoke`: the browser is end2end's, after the release build.)
    if opts.wants("b10") && !opts.smoke {
        if let Err(e) = benches::b10::run(&opts, &fake, &mut t).await {
            t.fail("B10 page", e);
        }
    }
    if opts.wants("b10") || opts.wants("b10-parse") {
        if let Err(e) = benches::b10_parse::run(&opts, &mut t) {
            t.fail("B10 parse", e);
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
