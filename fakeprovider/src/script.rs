//! Scripted answers: what a test queues for the next request (a stream, a status, a hang, a
//! hostile body, tool calls), and how each is played.
use crate::event_stream;
use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures::StreamExt;
use serde_json::Value;
use std::collections::{HashMap, VecDeque};
use std::time::Duration;

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
    /// Sends each raw SSE frame (its `event:`/`data:` lines or a comment, without the blank
    /// line that ends it) after `every`, then ends the body: any provider's wire shape.
    Frames {
        frames: Vec<String>,
        every: Duration,
    },
}

impl Script {
    /// The reply to a request nothing else answers: `ok`.
    pub fn default_reply() -> Script {
        Script::reply(&["ok"])
    }
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

/// The scripts waiting for requests: the shared queue, models' own queues, the default.
#[derive(Default)]
pub(crate) struct Scripts {
    queue: VecDeque<Script>,
    /// Models with scripts of their own (empty: the default reply), apart from `queue`.
    own: HashMap<String, VecDeque<Script>>,
    default: Option<Script>,
}

impl Scripts {
    pub(crate) fn push(&mut self, s: Script) {
        self.queue.push_back(s);
    }

    pub(crate) fn push_for(&mut self, model: &str, scripts: Vec<Script>) {
        self.own
            .entry(model.to_string())
            .or_default()
            .extend(scripts);
    }

    pub(crate) fn set_default(&mut self, s: Script) {
        self.default = Some(s);
    }

    /// The script queued for a request for `model`: its own next one (a model with scripts of
    /// its own gets the default reply once they are played, never the shared queue's), else
    /// the shared queue's next one, else none.
    pub(crate) fn next(&mut self, model: &str) -> Option<Script> {
        match self.own.get_mut(model) {
            Some(own) => Some(own.pop_front().unwrap_or_else(Script::default_reply)),
            None => self.queue.pop_front(),
        }
    }

    /// The answer when nothing is queued and the model routes nowhere.
    pub(crate) fn fallback(&self) -> Script {
        self.default.clone().unwrap_or_else(Script::default_reply)
    }
}

/// Plays `script` as the answer to one request.
pub(crate) async fn play(script: Script) -> Response {
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
        Script::Frames { frames, every } => {
            let body = futures::stream::iter(frames).then(move |f| async move {
                tokio::time::sleep(every).await;
                Ok::<_, std::io::Error>(Bytes::from(format!("{f}\n\n")))
            });
            event_stream(Body::from_stream(body))
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
            event_stream(Body::from_stream(stream))
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
            event_stream(Body::from_stream(stream))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(s: Option<Script>) -> Option<u16> {
        match s {
            Some(Script::Status { code, .. }) => Some(code),
            Some(Script::Stream { .. }) => Some(200),
            _ => None,
        }
    }

    #[test]
    fn own_scripts_then_the_default_reply_never_the_shared_queue() {
        let mut scripts = Scripts::default();
        scripts.push(Script::unavailable());
        scripts.push_for("child", vec![Script::unavailable()]);
        assert_eq!(code(scripts.next("child")), Some(503));
        assert_eq!(code(scripts.next("child")), Some(200), "the default reply");
        assert_eq!(code(scripts.next("parent")), Some(503), "the shared queue");
        assert_eq!(code(scripts.next("parent")), None, "nothing queued");
        assert_eq!(code(Some(scripts.fallback())), Some(200));
        scripts.set_default(Script::unavailable());
        assert_eq!(code(Some(scripts.fallback())), Some(503));
    }
}
