//! Test harness: a real Mulligan server (real SQLite file, real HTTP) in this process, and a
//! fake OpenAI-compatible provider that plays scripted answers and records every request.

/// The scriptable fake provider (shared with the bench).
pub mod fake {
    pub use fake_provider::{FakeProvider, Script};
}

mod cluster;
mod crash;
mod db;
mod process;
mod sse;

pub use cluster::{cluster_unavailable, Cluster};
pub use crash::Crashable;
pub use db::{
    database_url, execute_sql, fresh_postgres_database, on_postgres, postgres_url, WriteLock,
};
pub use process::{mulligan_bin, serve};
pub use sse::{run_ended, Sse};

use app::wire::{MessageId, Receipt, Run, RunId, RunStatus, SessionDetail};
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

/// A reference MCP server's launcher (`mcp-server-filesystem`, `mcp-server-everything`),
/// installed from end2end's lockfile by `scripts/toolchain.sh --browser`.
pub fn node_bin(name: &str) -> PathBuf {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../end2end/node_modules/.bin")
        .join(name);
    assert!(
        path.exists(),
        "{} is missing: run scripts/toolchain.sh --browser (it installs end2end's npm packages)",
        path.display()
    );
    path
}

pub fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "mulligan-test-{tag}-{}",
        uuid::Uuid::now_v7().simple()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A fresh fake provider and an in-process server on it (its own data dir named by `tag`).
pub async fn setup(tag: &str) -> (fake::FakeProvider, TestServer) {
    let fake = fake::FakeProvider::start().await;
    let server = TestServer::start(config(&temp_dir(tag), &fake.url)).await;
    (fake, server)
}

/// A session's first turn fails (after a slow start: a 503 whose advised wait of 500 ms Tier 1
/// sleeps out, so a second prompt queues behind it) and holds that second prompt. Answers the
/// failed run's id and the held prompt's receipt.
pub async fn held_behind_a_failure(
    fake: &fake::FakeProvider,
    server: &TestServer,
    sid: &str,
) -> (RunId, Receipt) {
    fake.push(fake::Script::Status {
        code: 503,
        headers: vec![("retry-after-ms", "500".into())],
        body: serde_json::json!({"error": {"message": "busy"}}),
    });
    fake.push(fake::Script::Status {
        code: 401,
        headers: vec![],
        body: serde_json::json!({"error": {"message": "bad key"}}),
    });
    let failing = server.send(sid, "one").await;
    let queued = server.send(sid, "two").await;
    assert!(
        queued.queued,
        "the second prompt did not queue behind the first: {queued:?}"
    );
    assert_eq!(
        server.wait_run_end(&failing.run_id).await.status,
        RunStatus::Failed
    );
    let held = server.run(&queued.run_id).await;
    assert_eq!(
        (held.status, held.held_by.as_ref()),
        (RunStatus::Queued, Some(&failing.run_id)),
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
    // Each provider delta goes out as its own event, so a test can follow a reply delta by
    // delta; `server/tests/deltas.rs` tests the default window, and the binary's tests run
    // with it.
    c.delta_window_ms = 0;
    c
}

/// [`config`] with `catalogue` (CONTRACT §7) as its `MULLIGAN_PROVIDERS` file, written into
/// `data_dir`.
pub fn config_with_catalogue(
    data_dir: &std::path::Path,
    provider_url: &str,
    catalogue: &Value,
) -> Config {
    let path = data_dir.join("providers.json");
    std::fs::write(&path, catalogue.to_string()).unwrap();
    let mut c = config(data_dir, provider_url);
    c.providers = Some(path);
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
    pub async fn stored_content(&self, message_id: &MessageId) -> String {
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

    pub async fn send(&self, sid: &(impl std::fmt::Display + ?Sized), content: &str) -> Receipt {
        let (status, body) = self
            .post(
                &format!("/sessions/{sid}/messages"),
                serde_json::json!({"content": content}),
            )
            .await;
        assert_eq!(status, 202, "{body}");
        serde_json::from_value(body).unwrap()
    }

    pub async fn detail(&self, sid: &(impl std::fmt::Display + ?Sized)) -> SessionDetail {
        let (status, body) = self.get(&format!("/sessions/{sid}")).await;
        assert_eq!(status, 200, "{body}");
        serde_json::from_value(body).unwrap()
    }

    pub async fn run(&self, rid: &(impl std::fmt::Display + ?Sized)) -> Run {
        let (status, body) = self.get(&format!("/runs/{rid}")).await;
        assert_eq!(status, 200, "{body}");
        serde_json::from_value(body["run"].clone()).unwrap()
    }

    /// Polls until the run has ended (10 s at most).
    pub async fn wait_run_end(&self, rid: &(impl std::fmt::Display + ?Sized)) -> Run {
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
    pub async fn wait_run_status(
        &self,
        rid: &(impl std::fmt::Display + ?Sized),
        status: RunStatus,
    ) -> Run {
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
    pub async fn events(
        &self,
        sid: &(impl std::fmt::Display + ?Sized),
        last_event_id: Option<i64>,
    ) -> Sse {
        let mut req = self
            .http
            .get(self.url(&format!("/sessions/{sid}/events")))
            .bearer_auth(&self.token);
        if let Some(id) = last_event_id {
            req = req.header("Last-Event-ID", id.to_string());
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status(), 200);
        Sse::of(resp)
    }

    /// Opens `GET /events?sessions=…`, the stream of several sessions (`list` as the query
    /// writes it: `ID:LAST_EVENT_ID,…`).
    pub async fn follow(&self, list: &str) -> Sse {
        let resp = self
            .http
            .get(self.url("/events"))
            .query(&[("sessions", list)])
            .bearer_auth(&self.token)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        Sse::of(resp)
    }
}

/// Now, in milliseconds since the Unix epoch (the contract's time).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}
