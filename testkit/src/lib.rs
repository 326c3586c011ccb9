//! Test harness: a real Mulligan server (real SQLite file, real HTTP) in this process, and a
//! fake OpenAI-compatible provider that plays scripted answers and records every request.

/// The scriptable fake provider (shared with the bench).
pub mod fake {
    pub use fake_provider::{FakeProvider, Script};
}

use app::wire::{Event, Receipt, Run, RunStatus, SessionDetail};
use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde_json::Value;
use server::config::{Config, ProviderKind};
use std::path::PathBuf;
use std::time::Duration;

pub const API_KEY: &str = "sk-test-SECRET-never-logged-42";

pub struct TestServer {
    pub running: Option<server::Running>,
    pub base: String,
    pub token: String,
    pub data_dir: PathBuf,
    pub http: reqwest::Client,
}

pub fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "mulligan-test-{tag}-{}",
        uuid::Uuid::now_v7().simple()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The PostgreSQL server the multi-instance tests use (`MULLIGAN_TEST_POSTGRES_URL`).
pub fn postgres_url() -> Option<String> {
    std::env::var("MULLIGAN_TEST_POSTGRES_URL")
        .ok()
        .filter(|u| !u.is_empty())
}

/// Whether the suite runs against PostgreSQL (`MULLIGAN_TEST_DATABASE=postgres`), else SQLite.
pub fn on_postgres() -> bool {
    std::env::var("MULLIGAN_TEST_DATABASE").as_deref() == Ok("postgres")
}

/// The database of a test's data dir: SQLite in it (the default), or, when the suite runs on
/// PostgreSQL, a fresh database made for that dir once (a restart in the same dir finds it).
pub fn database_url(data_dir: &std::path::Path) -> Option<String> {
    if !on_postgres() {
        return None;
    }
    let base =
        postgres_url().expect("MULLIGAN_TEST_DATABASE=postgres needs MULLIGAN_TEST_POSTGRES_URL");
    let kept = data_dir.join("postgres-url");
    if let Ok(url) = std::fs::read_to_string(&kept) {
        return Some(url);
    }
    let url = fresh_postgres_database(&base);
    std::fs::create_dir_all(data_dir).unwrap();
    std::fs::write(&kept, &url).unwrap();
    Some(url)
}

/// Creates an empty database beside `base`'s (on its own thread: tests run inside a runtime).
pub fn fresh_postgres_database(base: &str) -> String {
    let base = base.to_string();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            use sqlx::Connection;
            let mut admin = sqlx::PgConnection::connect(&base)
                .await
                .expect("MULLIGAN_TEST_POSTGRES_URL is reachable");
            let name = format!("mulligan_t_{}", uuid::Uuid::now_v7().simple());
            sqlx::query(&format!("CREATE DATABASE {name}"))
                .execute(&mut admin)
                .await
                .unwrap();
            let (head, tail) = match base.split_once('?') {
                Some((h, t)) => (h, format!("?{t}")),
                None => (base.as_str(), String::new()),
            };
            let root = head.rsplit_once('/').map_or(head, |(r, _)| r);
            format!("{root}/{name}{tail}")
        })
    })
    .join()
    .unwrap()
}

/// A fresh fake provider and an in-process server on it (its own data dir named by `tag`).
pub async fn setup(tag: &str) -> (fake::FakeProvider, TestServer) {
    let fake = fake::FakeProvider::start().await;
    let server = TestServer::start(config(&temp_dir(tag), &fake.url)).await;
    (fake, server)
}

/// A session's first turn fails (after a slow start, so a second prompt queues behind it) and
/// holds that second prompt. Answers the failed run's id and the held prompt's receipt.
pub async fn held_behind_a_failure(
    fake: &fake::FakeProvider,
    server: &TestServer,
    sid: &str,
) -> (String, Receipt) {
    fake.push(fake::Script::Stream {
        deltas: vec![],
        every: Duration::from_millis(200),
        finish: false,
    });
    fake.push(fake::Script::Status {
        code: 401,
        headers: vec![],
        body: serde_json::json!({"error": {"message": "bad key"}}),
    });
    let failing = server.send(sid, "one").await;
    let queued = server.send(sid, "two").await;
    assert_eq!(
        server.wait_run_end(&failing.run_id).await.status,
        RunStatus::Failed
    );
    let held = server.run(&queued.run_id).await;
    assert_eq!(
        (held.status, held.held_by.as_deref()),
        (RunStatus::Queued, Some(failing.run_id.as_str())),
        "the second prompt is held behind the failure"
    );
    (failing.run_id, queued)
}

pub fn config(data_dir: &std::path::Path, provider_url: &str) -> Config {
    let mut c = Config::for_data_dir(data_dir);
    c.database_url = database_url(data_dir);
    c.bind = "127.0.0.1:0".parse().unwrap();
    c.provider = ProviderKind::Openai;
    c.base_url = Some(provider_url.to_string());
    c.api_key = Some(API_KEY.to_string());
    c.model = Some("fake-model".into());
    c.token = None;
    // Tier 1 backs off in milliseconds here; advised waits are still honoured exactly.
    c.tier1_base_ms = 20;
    c
}

impl TestServer {
    pub async fn start(config: Config) -> TestServer {
        let data_dir = config.data_dir.clone();
        let running = server::start(config, false).await.expect("server starts");
        TestServer {
            base: format!("http://{}", running.addr),
            token: running.token.clone(),
            running: Some(running),
            data_dir,
            http: reqwest::Client::new(),
        }
    }

    pub async fn stop(&mut self) {
        if let Some(r) = self.running.take() {
            r.stop().await;
        }
    }

    /// A message's content as stored (not as the API overlays a streaming reply).
    pub async fn stored_content(&self, message_id: &str) -> String {
        let url = database_url(&self.data_dir)
            .unwrap_or_else(|| format!("sqlite://{}", self.data_dir.join("mulligan.db").display()));
        // The store's own read, on whichever backend the server uses: the row as written.
        let store = server::store::Store::open(&url).await.unwrap();
        let content = store.message(message_id).await.unwrap().content;
        store.close().await;
        content
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}{}", self.base, app::api::PREFIX, path)
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        let r = self
            .http
            .get(self.url(path))
            .bearer_auth(&self.token)
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
    }

    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }

    pub async fn patch(&self, path: &str, body: Value) -> (u16, Value) {
        self.call(reqwest::Method::PATCH, path, Some(body)).await
    }

    pub async fn delete(&self, path: &str) -> (u16, Value) {
        self.call(reqwest::Method::DELETE, path, None).await
    }

    /// One API call with the operator token: its status and JSON answer.
    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut req = self
            .http
            .request(method, self.url(path))
            .bearer_auth(&self.token);
        if let Some(body) = body {
            req = req.json(&body);
        }
        let r = req.send().await.unwrap();
        (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
    }

    pub async fn create_session(&self) -> String {
        let (status, body) = self
            .post("/sessions", serde_json::json!({"title": "test"}))
            .await;
        assert_eq!(status, 201, "{body}");
        body["id"].as_str().unwrap().to_string()
    }

    pub async fn send(&self, sid: &str, content: &str) -> Receipt {
        let (status, body) = self
            .post(
                &format!("/sessions/{sid}/messages"),
                serde_json::json!({"content": content}),
            )
            .await;
        assert_eq!(status, 202, "{body}");
        serde_json::from_value(body).unwrap()
    }

    pub async fn detail(&self, sid: &str) -> SessionDetail {
        let (status, body) = self.get(&format!("/sessions/{sid}")).await;
        assert_eq!(status, 200, "{body}");
        serde_json::from_value(body).unwrap()
    }

    pub async fn run(&self, rid: &str) -> Run {
        let (status, body) = self.get(&format!("/runs/{rid}")).await;
        assert_eq!(status, 200, "{body}");
        serde_json::from_value(body["run"].clone()).unwrap()
    }

    /// Polls until the run has ended (10 s at most).
    pub async fn wait_run_end(&self, rid: &str) -> Run {
        for _ in 0..400 {
            let run = self.run(rid).await;
            if !run.status.is_active() {
                return run;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("run {rid} did not end");
    }

    /// Polls until the run has the status.
    pub async fn wait_run_status(&self, rid: &str, status: RunStatus) -> Run {
        for _ in 0..400 {
            let run = self.run(rid).await;
            if run.status == status {
                return run;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("run {rid} never became {status:?}");
    }

    /// Opens the session's SSE stream, optionally resuming after an event id.
    pub async fn events(&self, sid: &str, last_event_id: Option<i64>) -> Sse {
        let mut req = self
            .http
            .get(self.url(&format!("/sessions/{sid}/events")))
            .bearer_auth(&self.token);
        if let Some(id) = last_event_id {
            req = req.header("Last-Event-ID", id.to_string());
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status(), 200);
        Sse {
            inner: resp.bytes_stream().eventsource().boxed(),
        }
    }
}

type EventBox = futures::stream::BoxStream<
    'static,
    Result<eventsource_stream::Event, eventsource_stream::EventStreamError<reqwest::Error>>,
>;

/// A session's event stream as the contract's events.
pub struct Sse {
    inner: EventBox,
}

impl Sse {
    /// The next event with its id; panics after `within`.
    pub async fn next(&mut self, within: Duration) -> (i64, Event) {
        loop {
            let ev = tokio::time::timeout(within, self.inner.next())
                .await
                .expect("an event in time")
                .expect("the stream is open")
                .expect("a well-formed event");
            if let Some(parsed) = Event::parse(&ev.event, &ev.data) {
                return (ev.id.parse().unwrap(), parsed.unwrap());
            }
        }
    }

    /// Events until `done` says stop (inclusive).
    pub async fn until(
        &mut self,
        within: Duration,
        mut done: impl FnMut(&Event) -> bool,
    ) -> Vec<(i64, Event)> {
        let mut out = Vec::new();
        loop {
            let e = self.next(within).await;
            let stop = done(&e.1);
            out.push(e);
            if stop {
                return out;
            }
        }
    }
}

/// True for a `run` event of `rid` that has ended.
pub fn run_ended(rid: &str) -> impl FnMut(&Event) -> bool + '_ {
    move |e| matches!(e, Event::Run(r) if r.id == rid && !r.status.is_active())
}

/// Starts `mulligan serve` as a child process (on `database_url`, else SQLite in `dir`) and
/// answers the child and a client of it (a [`TestServer`] whose server is that child).
pub async fn serve(
    dir: &std::path::Path,
    provider: &str,
    log: &std::path::Path,
    database_url: Option<String>,
    extra_env: &[(&str, &str)],
) -> (tokio::process::Child, TestServer) {
    let (child, base, token) = serve_raw(dir, provider, log, database_url, extra_env).await;
    let client = TestServer {
        running: None,
        base,
        token,
        data_dir: dir.to_path_buf(),
        http: reqwest::Client::new(),
    };
    (child, client)
}

async fn serve_raw(
    dir: &std::path::Path,
    provider: &str,
    log: &std::path::Path,
    database_url: Option<String>,
    extra_env: &[(&str, &str)],
) -> (tokio::process::Child, String, String) {
    use tokio::io::AsyncBufReadExt;
    let mut child = tokio::process::Command::new(mulligan_bin())
        .arg("serve")
        .env("MULLIGAN_BIND", "127.0.0.1:0")
        .env("MULLIGAN_DATA_DIR", dir)
        .envs(database_url.map(|u| ("MULLIGAN_DATABASE_URL", u)))
        .env("MULLIGAN_PROVIDER", "openai")
        .env("MULLIGAN_BASE_URL", provider)
        .env("MULLIGAN_API_KEY", API_KEY)
        .env("RUST_LOG", "trace")
        .envs(extra_env.iter().copied())
        .stdout(std::process::Stdio::piped())
        .stderr(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log)
                .unwrap(),
        )
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let url = line
        .split("open ")
        .nth(1)
        .expect("the printed URL")
        .trim()
        .to_string();
    let (base, token) = url.split_once("/?token=").unwrap();
    (child, base.to_string(), token.to_string())
}

/// Now, in milliseconds since the Unix epoch (the contract's time).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// The `mulligan` binary cargo builds for the server's integration tests, beside the running
/// test (`target/<profile>/mulligan`; the test itself is in `target/<profile>/deps/`).
pub fn mulligan_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let mut dir = exe.parent().expect("the test's directory").to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    dir.join(format!("mulligan{}", std::env::consts::EXE_SUFFIX))
}
