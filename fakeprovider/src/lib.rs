//! One scriptable fake OpenAI-compatible provider on loopback, shared by the server's tests
//! and the bench (the product's own demo provider is another thing). A request is answered by
//! the next script queued for its model ([`FakeProvider::push_for`]), else the next one of the
//! shared queue ([`FakeProvider::push`]), else by its model name's routed answer (see
//! [`routed`]: `stream-N-MS`, `markdown-N-MS`, `status-CODE-SECS`, `tool-K`), else the default reply
//! ([`FakeProvider::set_default`], or a short `ok`). Every request is recorded.
mod record;
pub mod routed;
mod script;

pub use record::Seen;
pub use routed::{
    clock_us, markdown_model, markdown_reply, parse_delta, status_model, stream_model, tool_model,
    ToolStep, TOOL_ASK_TEXT, TOOL_NAME, TOOL_REPLY_TEXT,
};
pub use script::Script;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::serve::ListenerExt;
use axum::Router;
use record::Record;
use script::Scripts;
use std::sync::{Arc, Mutex};
use std::time::Instant;

struct Shared {
    scripts: Mutex<Scripts>,
    record: Arc<Record>,
}

/// Stops the server when the last handle on it goes.
struct Serving(tokio::task::JoinHandle<()>);

impl Drop for Serving {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A handle on a running fake provider (clones share it; it stops when the last one drops).
#[derive(Clone)]
pub struct FakeProvider {
    /// Base URL, e.g. `http://127.0.0.1:PORT/v1`.
    pub url: String,
    shared: Arc<Shared>,
    _serving: Arc<Serving>,
}

impl FakeProvider {
    /// Starts one on a free loopback port (panics if it cannot: for tests).
    pub async fn start() -> FakeProvider {
        FakeProvider::try_start()
            .await
            .expect("the fake provider starts on loopback")
    }

    /// Starts one on a free loopback port.
    pub async fn try_start() -> std::io::Result<FakeProvider> {
        // The clock deltas are stamped on starts before the first request.
        clock_us();
        let shared = Arc::new(Shared {
            scripts: Mutex::default(),
            record: Arc::default(),
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(chat))
            // Anthropic's Messages API: answered the same way (scripts in its wire shape).
            .route("/v1/messages", post(chat))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}/v1", listener.local_addr()?);
        let record = shared.record.clone();
        let listener = listener.tap_io(move |tcp| {
            let _ = tcp.set_nodelay(true);
            record.connected();
        });
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(FakeProvider {
            url,
            shared,
            _serving: Arc::new(Serving(task)),
        })
    }

    /// Queues `s` for the next request whose model has no scripts of its own.
    pub fn push(&self, s: Script) -> &Self {
        self.shared.scripts.lock().unwrap().push(s);
        self
    }

    /// Gives `model` scripts of its own, apart from the shared queue: requests for it play
    /// these, then the default reply (a sub-session's turns never take the parent's scripts).
    pub fn push_for(&self, model: &str, scripts: Vec<Script>) {
        self.shared.scripts.lock().unwrap().push_for(model, scripts);
    }

    /// What answers when nothing is queued and the model routes nowhere (else `ok`).
    pub fn set_default(&self, s: Script) {
        self.shared.scripts.lock().unwrap().set_default(s);
    }

    /// Every request so far, in order.
    pub fn seen(&self) -> Vec<Seen> {
        self.shared.record.seen()
    }

    /// How many requests asked for `model` so far.
    pub fn requests(&self, model: &str) -> u64 {
        self.shared.record.requests(model)
    }

    /// How many TCP connections it accepted so far (a client that reuses its connections
    /// opens few).
    pub fn connections(&self) -> u64 {
        self.shared.record.connections()
    }

    /// The `tool-K` conversation whose last `user` message is `key`, as the fake saw it.
    pub fn tool_step(&self, key: &str) -> Option<ToolStep> {
        self.shared.record.tool_step(key)
    }
}

/// How a request is answered.
enum Pick {
    Script(Script),
    Routed(routed::Answer),
}

async fn chat(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    // Before parsing: a `tool-K` follow-up's arrival is what the bench measures.
    let arrived_us = clock_us();
    let request = serde_json::from_slice::<serde_json::Value>(&body).unwrap_or_default();
    let model = request
        .get("model")
        .and_then(|m| m.as_str())
        .unwrap_or_default()
        .to_string();
    let record = &shared.record;
    record.count(&model);
    let pick = {
        let mut scripts = shared.scripts.lock().unwrap();
        match scripts.next(&model) {
            Some(s) => Pick::Script(s),
            None => match routed::answer_for(&model) {
                Some(a) => Pick::Routed(a),
                None => Pick::Script(scripts.fallback()),
            },
        }
    };
    // Built before the request is kept, so a `tool-K` step reads it without a copy.
    let routed = match pick {
        Pick::Routed(a) => Ok(routed::respond(a, &request, record, arrived_us)),
        Pick::Script(s) => Err(s),
    };
    record.keep(Seen {
        at: Instant::now(),
        body: request,
        authorization: headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string),
    });
    match routed {
        Ok(response) => response,
        Err(s) => script::play(s).await,
    }
}

/// A 200 `text/event-stream` answer with `body`.
fn event_stream(body: Body) -> Response {
    let mut resp = body.into_response();
    resp.headers_mut().insert(
        "content-type",
        HeaderValue::from_static("text/event-stream"),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Posts a chat request for `model` and answers the raw HTTP response.
    async fn ask(fake: &FakeProvider, model: &str) -> String {
        let addr = fake
            .url
            .trim_start_matches("http://")
            .trim_end_matches("/v1");
        let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let body = serde_json::json!({"model": model, "messages": []}).to_string();
        let request = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nhost: fake\r\nauthorization: Bearer k\r\n\
             content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        tcp.write_all(request.as_bytes()).await.unwrap();
        let mut out = String::new();
        tcp.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn a_queued_script_then_the_model_route_then_the_default_reply() {
        let fake = FakeProvider::start().await;
        fake.push(Script::unavailable());
        let model = stream_model(2, 0);
        assert!(ask(&fake, &model).await.starts_with("HTTP/1.1 503"));
        let routed = ask(&fake, &model).await;
        assert!(routed.contains("\"content\":\"1@"), "{routed}");
        assert!(ask(&fake, &status_model(429, 7))
            .await
            .contains("retry-after: 7"));
        let default = ask(&fake, "gpt-test").await;
        assert!(default.contains("\"content\":\"ok\""), "{default}");
        assert_eq!(fake.requests(&model), 2);
        let seen = fake.seen();
        assert_eq!(seen.len(), 4);
        assert_eq!(seen[3].body["model"], "gpt-test");
        assert_eq!(seen[0].authorization.as_deref(), Some("Bearer k"));
        assert_eq!(fake.connections(), 4);
    }
}
