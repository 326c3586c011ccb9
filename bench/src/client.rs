//! The Mulligan server under test, run as a child process of this binary (so its peak RSS
//! and CPU time are its own: `/proc/<pid>/status` VmHWM, `/proc/<pid>/stat` utime+stime),
//! and the client side: the API calls the benchmarks make and a session's SSE stream that
//! resumes with `Last-Event-ID` after a drop, as `EventSource` does.
use crate::R;
use app::api;
use app::wire::{Event, Receipt, Run, RunId};
use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::AsyncBufReadExt;

/// Set in the child's environment: the binary serves instead of benchmarking.
pub const CHILD_ENV: &str = "MULLIGAN_BENCH_CHILD";

/// The child's side: serves with the configuration its environment gives (`MULLIGAN_*`,
/// CONTRACT §1), prints `LISTENING <addr> <token>`, stops gracefully when stdin closes.
pub fn serve_child() -> std::process::ExitCode {
    let data_dir = std::env::var("MULLIGAN_DATA_DIR").unwrap_or_else(|_| "./data".into());
    let config = server::config::Config::for_data_dir(data_dir);
    // Quiet unless asked: `RUST_LOG=sqlx=debug,server=debug mulligan-bench …` shows the
    // server's timeline (every statement with its time) on stderr, for profiling.
    if let Ok(filter) = tracing_subscriber::EnvFilter::try_from_default_env() {
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .init();
    }
    let rt = tokio::runtime::Runtime::new().expect("the tokio runtime starts");
    rt.block_on(async move {
        let running = match server::start(config, false).await {
            Ok(r) => r,
            Err(e) => {
                eprintln!("mulligan-bench child: {e}");
                return std::process::ExitCode::FAILURE;
            }
        };
        println!("LISTENING {} {}", running.addr, running.token);
        let _ = tokio::task::spawn_blocking(|| {
            use std::io::Read;
            let mut buf = [0u8; 64];
            while matches!(std::io::stdin().read(&mut buf), Ok(n) if n > 0) {}
        })
        .await;
        running.stop().await;
        std::process::ExitCode::SUCCESS
    })
}

/// A running server child.
pub struct Server {
    child: tokio::process::Child,
    pub pid: u32,
    pub base: String,
    pub token: String,
    data_dir: PathBuf,
    pub http: reqwest::Client,
}

/// CPU time and memory of a process, from `/proc`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Usage {
    pub cpu: Duration,
    pub peak_rss_kb: u64,
    /// Context switches of all its threads so far (voluntary and not): each is a thread
    /// that went to sleep or was preempted, so it counts the wake-ups the process paid for.
    pub switches: u64,
}

pub fn usage(pid: u32) -> Usage {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command's closing parenthesis; utime and stime are fields 14 and 15.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let clk_tck = 100; // USER_HZ, 100 on every Linux we run on
    let cpu = Duration::from_millis((ticks(11) + ticks(12)) * 1000 / clk_tck);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let peak_rss_kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    Usage {
        cpu,
        peak_rss_kb,
        switches: switches(pid),
    }
}

/// The sum of every thread's context switches (`/proc/<pid>/task/*/status`).
fn switches(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("status")).ok())
        .flat_map(|status| {
            status
                .lines()
                .filter(|l| l.contains("ctxt_switches:"))
                .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                .collect::<Vec<_>>()
        })
        .sum()
}

/// Busy and total jiffies of the whole machine (`/proc/stat`), for how loaded it was.
pub fn machine_jiffies() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let v: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    let total: u64 = v.iter().take(8).sum();
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    (total - idle, total)
}

impl Server {
    /// Starts `mulligan-bench` as a Mulligan server on 127.0.0.1:0 with the `openai` provider
    /// at `provider_url`, SQLite in a fresh temp dir, and the given extra `MULLIGAN_*` settings.
    pub async fn start(provider_url: &str, extra: &[(&str, String)]) -> R<Server> {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let data_dir =
            std::env::temp_dir().join(format!("mulligan-bench-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&data_dir);
        Server::start_in(data_dir, provider_url, extra).await
    }

    /// Stops the server gracefully and starts it again on the same data (and settings).
    pub async fn restart(mut self, provider_url: &str, extra: &[(&str, String)]) -> R<Server> {
        drop(self.child.stdin.take());
        let _ = tokio::time::timeout(Duration::from_secs(30), self.child.wait()).await;
        let data_dir = std::mem::take(&mut self.data_dir);
        Server::start_in(data_dir, provider_url, extra).await
    }

    async fn start_in(
        data_dir: PathBuf,
        provider_url: &str,
        extra: &[(&str, String)],
    ) -> R<Server> {
        let exe = std::env::current_exe().map_err(|e| format!("own executable: {e}"))?;
        let mut cmd = tokio::process::Command::new(exe);
        for (k, _) in std::env::vars() {
            if k.starts_with("MULLIGAN_") {
                cmd.env_remove(k);
            }
        }
        cmd.env(CHILD_ENV, "1")
            .env("MULLIGAN_BIND", "127.0.0.1:0")
            .env("MULLIGAN_DATA_DIR", &data_dir)
            .env("MULLIGAN_PROVIDER", "openai")
            .env("MULLIGAN_BASE_URL", provider_url)
            .env("MULLIGAN_API_KEY", "sk-bench")
            .env("MULLIGAN_MODEL", crate::fake::stream_model(10, 0));
        for (k, v) in extra {
            cmd.env(k, v);
        }
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        let mut child = cmd.spawn().map_err(|e| format!("start the server: {e}"))?;
        let pid = child.id().ok_or("the server exited at once")?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .map_err(|_| "the server did not start within 60 s")?
            .map_err(|e| e.to_string())?
            .ok_or("the server exited before listening")?;
        let mut words = line.split_whitespace();
        let (Some("LISTENING"), Some(addr), Some(token)) =
            (words.next(), words.next(), words.next())
        else {
            return Err(format!("unexpected first line from the server: {line}"));
        };
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(usize::MAX)
            .build()
            .map_err(|e| e.to_string())?;
        Ok(Server {
            child,
            pid,
            base: format!("http://{addr}"),
            token: token.to_string(),
            data_dir,
            http,
        })
    }

    pub fn usage(&self) -> Usage {
        usage(self.pid)
    }

    /// Its resident memory now (KiB), threads and open file descriptors (sockets, database
    /// files): what something held per waiting run would grow.
    pub fn holdings(&self) -> (u64, u64, usize) {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.pid)).unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
                .unwrap_or(0)
        };
        let fds = std::fs::read_dir(format!("/proc/{}/fd", self.pid)).map_or(0, |d| d.count());
        (field("VmRSS:"), field("Threads:"), fds)
    }

    /// `GET` of an API path: its JSON, or why not.
    pub async fn get(&self, path: &str) -> R<Value> {
        self.expect(reqwest::Method::GET, path, None, 200).await
    }

    /// `POST` of an API path: its status and JSON.
    pub async fn post(&self, path: &str, body: Value) -> R<(u16, Value)> {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }

    /// Closes its stdin (a graceful stop), waits, removes its data dir.
    pub async fn stop(mut self) {
        drop(self.child.stdin.take());
        let _ = tokio::time::timeout(Duration::from_secs(30), self.child.wait()).await;
        let _ = self.child.start_kill();
        let _ = std::fs::remove_dir_all(&self.data_dir);
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> R<(u16, Value)> {
        let mut req = self
            .http
            .request(method.clone(), format!("{}{path}", self.base))
            .bearer_auth(&self.token);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req
            .send()
            .await
            .map_err(|e| format!("{method} {path}: {e}"))?;
        let status = resp.status().as_u16();
        let v = resp.json().await.unwrap_or(Value::Null);
        Ok((status, v))
    }

    async fn expect(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
        want: u16,
    ) -> R<Value> {
        let (status, v) = self.call(method.clone(), path, body).await?;
        if status != want {
            return Err(format!("{method} {path}: {status} {v}"));
        }
        Ok(v)
    }

    pub async fn create_session(&self, model: &str) -> R<String> {
        let v = self
            .expect(
                reqwest::Method::POST,
                &api::CREATE_SESSION.url(&[]),
                Some(json!({"title": "bench", "model": model})),
                201,
            )
            .await?;
        v["id"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| format!("no session id in {v}"))
    }

    pub async fn post_message(&self, sid: &str, content: &str) -> R<Receipt> {
        let v = self
            .expect(
                reqwest::Method::POST,
                &api::POST_MESSAGE.url(&[sid]),
                Some(json!({"content": content})),
                202,
            )
            .await?;
        serde_json::from_value(v).map_err(|e| format!("receipt: {e}"))
    }

    /// `POST …/runs/:rid/cancel`: the status and the answered run.
    pub async fn cancel(&self, sid: &str, rid: &RunId) -> R<(u16, Value)> {
        self.call(
            reqwest::Method::POST,
            &api::CANCEL_RUN.url(&[sid, rid.as_str()]),
            None,
        )
        .await
    }

    pub async fn patch_session(&self, sid: &str, body: Value) -> R<(u16, Value)> {
        self.call(
            reqwest::Method::PATCH,
            &api::PATCH_SESSION.url(&[sid]),
            Some(body),
        )
        .await
    }

    pub async fn run(&self, rid: &RunId) -> R<Run> {
        let v = self
            .expect(
                reqwest::Method::GET,
                &api::RUN.url(&[rid.as_str()]),
                None,
                200,
            )
            .await?;
        serde_json::from_value(v["run"].clone()).map_err(|e| format!("run: {e}"))
    }

    /// Subscribes to a session's events (only new ones).
    pub async fn events(&self, sid: &str) -> R<Events> {
        let mut e = Events {
            http: self.http.clone(),
            url: format!("{}{}", self.base, api::EVENTS.url(&[sid])),
            token: self.token.clone(),
            inner: None,
            last_id: None,
            reconnects: 0,
        };
        e.connect().await?;
        Ok(e)
    }
}

type EventBox = futures::stream::BoxStream<
    'static,
    Result<eventsource_stream::Event, eventsource_stream::EventStreamError<reqwest::Error>>,
>;

/// A session's SSE stream; when the server ends it (e.g. a lagging subscriber), it resumes
/// from the last event id like `EventSource`, and counts that.
pub struct Events {
    http: reqwest::Client,
    url: String,
    token: String,
    inner: Option<EventBox>,
    last_id: Option<i64>,
    pub reconnects: u32,
}

impl Events {
    async fn connect(&mut self) -> R<()> {
        let mut req = self.http.get(&self.url).bearer_auth(&self.token);
        if let Some(id) = self.last_id {
            req = req.header("Last-Event-ID", id.to_string());
        }
        let resp = req.send().await.map_err(|e| format!("GET events: {e}"))?;
        if resp.status() != 200 {
            return Err(format!("GET events: {}", resp.status()));
        }
        self.inner = Some(resp.bytes_stream().eventsource().boxed());
        Ok(())
    }

    /// The next contract event and when it arrived; fails after `within` without one.
    pub async fn next(&mut self, within: Duration) -> R<(Event, Instant)> {
        loop {
            let Some(inner) = self.inner.as_mut() else {
                if self.reconnects >= 1000 {
                    return Err("the event stream keeps ending".into());
                }
                self.reconnects += 1;
                self.connect().await?;
                continue;
            };
            let ev = match tokio::time::timeout(within, inner.next()).await {
                Err(_) => return Err(format!("no event within {within:?}")),
                Ok(None) | Ok(Some(Err(_))) => {
                    self.inner = None;
                    continue;
                }
                Ok(Some(Ok(ev))) => ev,
            };
            let at = Instant::now();
            if let Ok(id) = ev.id.parse::<i64>() {
                self.last_id = Some(id);
            }
            match Event::parse(&ev.event, &ev.data) {
                None => continue,
                Some(Ok(e)) => return Ok((e, at)),
                Some(Err(e)) => return Err(format!("bad {} event: {e}", ev.event)),
            }
        }
    }
}
