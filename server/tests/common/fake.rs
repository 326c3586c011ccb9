//! A fake OpenAI-compatible provider for tests: plays queued scripted answers (or a default)
//! and records every request it gets.
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use futures::StreamExt;
use serde_json::Value;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Clone, Debug)]
pub enum Script {
    /// Streams the deltas, each after `every`; `finish` ends with usage and `[DONE]`, else cuts.
    Stream {
        deltas: Vec<String>,
        every: Duration,
        finish: bool,
    },
    /// Streams the deltas quickly, then sends nothing for `stall` (the connection stays open).
    StallAfter {
        deltas: Vec<String>,
        stall: Duration,
    },
    /// Answers a status with headers and a JSON body.
    Status {
        code: u16,
        headers: Vec<(&'static str, String)>,
        body: Value,
    },
    /// Accepts the request and never answers (no status line).
    Hang,
    /// Answers `code` with a JSON error whose message is `bytes` long, generated as it is sent.
    HugeError { code: u16, bytes: usize },
    /// Answers 200 and one SSE line of `bytes` bytes that never ends in a newline.
    LongLine { bytes: usize },
    /// Streams deltas of `text` for ever, each after `every` (zero: as fast as it can).
    Endless { text: String, every: Duration },
    /// Streams one delta, then reports `total_tokens` as the call's usage, and finishes.
    Usage { total_tokens: u64 },
    /// Streams `text`, then asks for tool calls `(id, name, arguments JSON)`, each call's
    /// arguments in two fragments, and finishes with `finish_reason: tool_calls`.
    ToolCalls {
        text: String,
        calls: Vec<(String, String, String)>,
    },
}

impl Script {
    pub fn reply(words: &[&str]) -> Script {
        Script::Stream {
            deltas: words.iter().map(|w| w.to_string()).collect(),
            every: Duration::from_millis(5),
            finish: true,
        }
    }
    /// 503 with an OpenAI-style `server_error`: retryable, and Tier 1 retries it.
    pub fn unavailable() -> Script {
        Script::Status {
            code: 503,
            headers: vec![],
            body: serde_json::json!({"error": {"type": "server_error", "message": "busy"}}),
        }
    }
    /// A step that asks for one tool call (`name` as the model sees it: `<server>__<tool>`).
    pub fn call(text: &str, id: &str, name: &str, arguments: Value) -> Script {
        Script::ToolCalls {
            text: text.into(),
            calls: vec![(id.into(), name.into(), arguments.to_string())],
        }
    }
    pub fn slow(n: usize, every: Duration) -> Script {
        Script::Stream {
            deltas: (0..n).map(|i| format!("w{i} ")).collect(),
            every,
            finish: true,
        }
    }
}

#[derive(Clone, Debug)]
pub struct Seen {
    pub at: Instant,
    pub body: Value,
    pub authorization: Option<String>,
}

#[derive(Default)]
struct Inner {
    queue: VecDeque<Script>,
    /// Models with scripts of their own (empty: the default reply), apart from `queue`.
    own: std::collections::HashMap<String, VecDeque<Script>>,
    default: Option<Script>,
    seen: Vec<Seen>,
}

#[derive(Clone)]
pub struct FakeProvider {
    inner: Arc<Mutex<Inner>>,
    pub url: String,
}

impl FakeProvider {
    pub async fn start() -> FakeProvider {
        let inner: Arc<Mutex<Inner>> = Arc::default();
        let app = Router::new()
            .route("/v1/chat/completions", post(chat))
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/v1", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        FakeProvider { inner, url }
    }

    pub fn push(&self, s: Script) -> &Self {
        self.inner.lock().unwrap().queue.push_back(s);
        self
    }

    /// Gives `model` scripts of its own, apart from the shared queue: requests for it play
    /// these, then the default reply (a sub-session's turns never take the parent's scripts).
    pub fn push_for(&self, model: &str, scripts: Vec<Script>) {
        self.inner
            .lock()
            .unwrap()
            .own
            .entry(model.to_string())
            .or_default()
            .extend(scripts);
    }

    pub fn set_default(&self, s: Script) {
        self.inner.lock().unwrap().default = Some(s);
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.inner.lock().unwrap().seen.clone()
    }
}

async fn chat(
    State(inner): State<Arc<Mutex<Inner>>>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let script = {
        let mut i = inner.lock().unwrap();
        i.seen.push(Seen {
            at: Instant::now(),
            body,
            authorization: headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string),
        });
        let model = i
            .seen
            .last()
            .and_then(|s| s.body["model"].as_str())
            .unwrap_or_default()
            .to_string();
        let next = match i.own.get_mut(&model) {
            Some(own) => own.pop_front().or(Some(Script::reply(&["ok"]))),
            None => i.queue.pop_front(),
        };
        next.or_else(|| i.default.clone())
            .unwrap_or_else(|| Script::reply(&["ok"]))
    };
    match script {
        Script::Hang => std::future::pending().await,
        Script::HugeError { code, bytes } => {
            let filler = Bytes::from(vec![b'x'; 64 * 1024]);
            let chunks = bytes.div_ceil(filler.len());
            let body = futures::stream::iter(
                std::iter::once(Bytes::from_static(
                    br#"{"error":{"type":"server_error","message":""#,
                ))
                .chain(std::iter::repeat_n(filler, chunks))
                .chain(std::iter::once(Bytes::from_static(br#""}}"#)))
                .map(Ok::<_, std::io::Error>),
            );
            let mut resp = Body::from_stream(body).into_response();
            *resp.status_mut() = StatusCode::from_u16(code).unwrap();
            resp.headers_mut()
                .insert("content-type", HeaderValue::from_static("application/json"));
            resp
        }
        Script::LongLine { bytes } => {
            let filler = Bytes::from(vec![b'x'; 64 * 1024]);
            let chunks = bytes.div_ceil(filler.len());
            let body = futures::stream::iter(
                std::iter::once(Bytes::from_static(b"data: "))
                    .chain(std::iter::repeat_n(filler, chunks))
                    .map(Ok::<_, std::io::Error>),
            )
            // The connection stays open after the line: only the cap can end the call.
            .chain(futures::stream::pending());
            event_stream(Body::from_stream(body))
        }
        Script::Endless { text, every } => {
            let chunk = serde_json::json!({"choices": [{"index": 0, "delta": {"content": text}}]});
            let frame = Bytes::from(format!("data: {chunk}\n\n"));
            let body = futures::stream::unfold(frame, move |frame| async move {
                if every.is_zero() {
                    tokio::task::yield_now().await;
                } else {
                    tokio::time::sleep(every).await;
                }
                Some((Ok::<_, std::io::Error>(frame.clone()), frame))
            });
            event_stream(Body::from_stream(body))
        }
        Script::Usage { total_tokens } => {
            let body = format!(
                "data: {}\n\ndata: {{\"choices\":[],\"usage\":{{\"total_tokens\":{total_tokens}}}}}\n\ndata: [DONE]\n\n",
                serde_json::json!({"choices": [{"index": 0, "delta": {"content": "counted"}}]})
            );
            event_stream(Body::from(body))
        }
        Script::ToolCalls { text, calls } => {
            let mut body = String::new();
            let mut frame = |v: Value| body.push_str(&format!("data: {v}\n\n"));
            if !text.is_empty() {
                frame(serde_json::json!({"choices": [{"index": 0, "delta": {"content": text}}]}));
            }
            for (i, (id, name, args)) in calls.iter().enumerate() {
                let (a, b) = args.split_at(args.len() / 2);
                frame(
                    serde_json::json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                    {"index": i, "id": id, "type": "function", "function": {"name": name, "arguments": a}}]}}]}),
                );
                frame(
                    serde_json::json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                    {"index": i, "function": {"arguments": b}}]}}]}),
                );
            }
            frame(
                serde_json::json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
            );
            frame(serde_json::json!({"choices": [], "usage": {"total_tokens": 11}}));
            body.push_str("data: [DONE]\n\n");
            event_stream(Body::from(body))
        }
        Script::Status {
            code,
            headers,
            body,
        } => {
            let mut resp = (StatusCode::from_u16(code).unwrap(), Json(body)).into_response();
            for (k, v) in headers {
                resp.headers_mut()
                    .insert(k, HeaderValue::from_str(&v).unwrap());
            }
            resp
        }
        Script::StallAfter { deltas, stall } => {
            let chunks: Vec<Result<Bytes, std::io::Error>> = deltas
                .iter()
                .map(|t| {
                    let chunk =
                        serde_json::json!({"choices": [{"index": 0, "delta": {"content": t}}]});
                    Ok(Bytes::from(format!("data: {chunk}\n\n")))
                })
                .collect();
            let stream = futures::stream::iter(chunks).chain(futures::stream::once(async move {
                tokio::time::sleep(stall).await;
                Ok(Bytes::from("data: [DONE]\n\n"))
            }));
            let mut resp = Body::from_stream(stream).into_response();
            resp.headers_mut().insert(
                "content-type",
                HeaderValue::from_static("text/event-stream"),
            );
            resp
        }
        Script::Stream {
            deltas,
            every,
            finish,
        } => {
            let stream = futures::stream::unfold(
                (deltas.into_iter(), false),
                move |(mut it, ended)| async move {
                    if ended {
                        return None;
                    }
                    match it.next() {
                    Some(text) => {
                        tokio::time::sleep(every).await;
                        let chunk = serde_json::json!({"choices": [{"index": 0, "delta": {"content": text}}]});
                        Some((Ok::<_, std::io::Error>(Bytes::from(format!("data: {chunk}\n\n"))), (it, false)))
                    }
                    None if finish => Some((
                        Ok(Bytes::from("data: {\"choices\":[],\"usage\":{\"total_tokens\":7}}\n\ndata: [DONE]\n\n")),
                        (it, true),
                    )),
                    None => {
                        // Let what was sent reach the client, then cut the connection.
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        Some((Err(std::io::Error::other("cut")), (it, true)))
                    }
                }
                },
            );
            let mut resp = Body::from_stream(stream).into_response();
            resp.headers_mut().insert(
                "content-type",
                HeaderValue::from_static("text/event-stream"),
            );
            resp
        }
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
