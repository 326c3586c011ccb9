//! Answers routed by the request's model name, so one fake serves every benchmark and the
//! bench's direct client asks it exactly what Mulligan asks it:
//!
//! - `stream-N-MS`: N deltas, one every MS milliseconds on a fixed schedule (0: as fast as
//!   the connection takes them), then usage and `[DONE]`. Delta `k` (0-based) has the text
//!   `"k@T "`, T being when it was sent in microseconds on [`clock_us`], so a client in this
//!   process can check order and loss and measure each delta's transit time.
//! - `markdown-N-MS`: N deltas of 8 bytes, one every MS milliseconds, that together are a
//!   reply written the way models write one ([`markdown_reply`]: headings, paragraphs with
//!   strong text, code spans and links, nested lists, fenced code), then usage and `[DONE]`,
//!   when the last `user` message is `go`; any other prompt gets the one delta `ok.`.
//! - `status-CODE-SECS`: answers CODE with `Retry-After: SECS` and an OpenAI error body.
//! - `tool-K`: an agent turn of two model steps. A conversation that does not end with a
//!   `tool` message gets one short delta, then K calls of `mulligan__list_sessions` with `{}`
//!   (`finish_reason: tool_calls`); one that ends with a `tool` message gets a short reply.
//!   Per conversation (keyed by its last `user` message) the fake records when it produced the
//!   tool-call answer's `[DONE]` and when the follow-up request arrived
//!   ([`crate::FakeProvider::tool_step`]).
//!
//! Anything after the model's numbers is a tag that only makes the model (a cooldown's key)
//! new.
use crate::event_stream;
use crate::record::Record;
use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

/// Microseconds since this process's benchmark clock started (shared by fake and client).
pub fn clock_us() -> u64 {
    EPOCH.elapsed().as_micros() as u64
}

/// The model that makes the fake stream `n` deltas, one every `every_ms`.
pub fn stream_model(n: usize, every_ms: u64) -> String {
    format!("stream-{n}-{every_ms}")
}

/// The model that makes the fake stream `n` deltas of [`markdown_reply`], one every `every_ms`.
pub fn markdown_model(n: usize, every_ms: u64) -> String {
    format!("markdown-{n}-{every_ms}")
}

/// How many bytes each `markdown-N-MS` delta carries.
pub const MARKDOWN_DELTA: usize = 8;

/// A reply of `bytes` bytes (ASCII, so any cut is a character boundary) shaped as models
/// write: sections of a heading, a paragraph with strong text, code spans and a link, a list
/// with nested items, and a fenced code block, repeated (numbered) until it is long enough.
pub fn markdown_reply(bytes: usize) -> String {
    let mut text = String::with_capacity(bytes + 512);
    let mut k = 0usize;
    while text.len() < bytes {
        k += 1;
        text.push_str(&format!(
            "## Step {k}: what changes\n\n\
             The handler for **request {k}** reads `config.retries` first, then calls \
             [the provider](https://example.com/docs/{k}) with a deadline. If the call \
             fails with *overloaded*, it waits and tries again; otherwise it returns the \
             error as it is.\n\n\
             - Parse the input with `serde_json::from_str`\n\
             \x20 - reject a body over **64 KiB**\n\
             \x20 - keep unknown fields\n\
             - Call `send({k})` and record the attempt\n\
             - Return the reply\n\n\
             ```rust\n\
             fn step_{k}(input: &str) -> Result<u32, Error> {{\n\
             \x20   let n: u32 = input.trim().parse()?;\n\
             \x20   Ok(n.saturating_mul({k}))\n\
             }}\n\
             ```\n\n"
        ));
    }
    text.truncate(bytes);
    text
}

/// The model that makes the fake answer `code` with `Retry-After: secs`.
pub fn status_model(code: u16, secs: u64) -> String {
    format!("status-{code}-{secs}")
}

/// The model that makes the fake ask for `calls` tool calls, then answer.
pub fn tool_model(calls: usize) -> String {
    format!("tool-{calls}")
}

/// The tool every `tool-K` call asks for (Mulligan's built-in source, always offered).
pub const TOOL_NAME: &str = "mulligan__list_sessions";

/// The text of a `tool-K` step's delta: before the calls (step 1) and the reply (step 2).
pub const TOOL_ASK_TEXT: &str = "Let me look. ";
pub const TOOL_REPLY_TEXT: &str = "Done.";

/// One `tool-K` conversation as the fake saw it (µs on [`clock_us`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct ToolStep {
    /// Requests that asked for tool calls, and follow-ups (a conversation ending in `tool`).
    pub asks: u32,
    pub follow_ups: u32,
    /// When the tool-call answer's `[DONE]` was handed to the connection.
    pub asked_done_us: Option<u64>,
    /// When the (first) follow-up request arrived at the handler.
    pub follow_up_us: Option<u64>,
}

/// The index and send time (µs) a delta's text carries.
pub fn parse_delta(text: &str) -> Option<(usize, u64)> {
    let (k, t) = text.trim_end().split_once('@')?;
    Some((k.parse().ok()?, t.parse().ok()?))
}

/// What a routed model asks for.
#[derive(Debug, PartialEq)]
pub(crate) enum Answer {
    Stream { n: usize, every: Duration },
    Markdown { n: usize, every: Duration },
    Status { code: StatusCode, secs: u64 },
    Tool { calls: usize },
}

/// The answer `model` routes to, if its name is one of the forms above.
pub(crate) fn answer_for(model: &str) -> Option<Answer> {
    let mut parts = model.split('-');
    let kind = parts.next()?;
    let a: u64 = parts.next()?.parse().ok()?;
    if kind == "tool" {
        return Some(Answer::Tool { calls: a as usize });
    }
    let b: u64 = parts.next()?.parse().ok()?;
    match kind {
        "stream" => Some(Answer::Stream {
            n: a as usize,
            every: Duration::from_millis(b),
        }),
        "markdown" => Some(Answer::Markdown {
            n: a as usize,
            every: Duration::from_millis(b),
        }),
        "status" => Some(Answer::Status {
            code: StatusCode::from_u16(a as u16).ok()?,
            secs: b,
        }),
        _ => None,
    }
}

/// Answers one request (`request`, arrived at `arrived_us`) as `answer` says.
pub(crate) fn respond(
    answer: Answer,
    request: &serde_json::Value,
    record: &Arc<Record>,
    arrived_us: u64,
) -> Response {
    match answer {
        Answer::Status { code, secs } => {
            error(code, "bench_status", "scripted failure", Some(secs))
        }
        Answer::Stream { n, every } => stream(n, every, chunk),
        // (Any prompt but `go` gets a one-delta reply: a bench fills a long session fast.)
        Answer::Markdown { .. } if last_user(request) != Some("go") => {
            stream(1, Duration::ZERO, |_| {
                Bytes::from_static(
                    b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok.\"}}]}\n\n",
                )
            })
        }
        Answer::Markdown { n, every } => {
            let text: Arc<str> = markdown_reply(n.saturating_mul(MARKDOWN_DELTA)).into();
            stream(n, every, move |k| {
                let at = k * MARKDOWN_DELTA;
                let piece = text.get(at..at + MARKDOWN_DELTA).unwrap_or_default();
                Bytes::from(format!(
                    "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":{}}}}}]}}\n\n",
                    serde_json::Value::from(piece)
                ))
            })
        }
        Answer::Tool { calls } => tool_step(record.clone(), request, calls, arrived_us),
    }
}

/// The text of the conversation's last `user` message.
fn last_user(request: &serde_json::Value) -> Option<&str> {
    request
        .get("messages")?
        .as_array()?
        .iter()
        .rev()
        .find(|m| m.get("role").and_then(|r| r.as_str()) == Some("user"))?
        .get("content")?
        .as_str()
}

/// A `tool-K` step: the calls when the conversation does not end with a `tool` message (the
/// time its `[DONE]` is produced is recorded), else the reply (its arrival is recorded).
fn tool_step(
    seen: Arc<Record>,
    request: &serde_json::Value,
    calls: usize,
    arrived_us: u64,
) -> Response {
    let messages = request
        .get("messages")
        .and_then(|m| m.as_array())
        .map(Vec::as_slice)
        .unwrap_or_default();
    fn role(m: &serde_json::Value) -> &str {
        m.get("role").and_then(|r| r.as_str()).unwrap_or("")
    }
    let key = messages
        .iter()
        .rev()
        .find(|m| role(m) == "user")
        .and_then(|m| m.get("content")?.as_str())
        .unwrap_or_default()
        .to_string();
    let follow_up = messages.last().is_some_and(|m| role(m) == "tool");
    {
        let mut steps = seen.tool_steps.lock().unwrap();
        let step = steps.entry(key.clone()).or_default();
        if follow_up {
            step.follow_ups += 1;
            step.follow_up_us.get_or_insert(arrived_us);
        } else {
            step.asks += 1;
        }
    }
    let text = |t: &str| {
        Bytes::from(format!(
            "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":{}}}}}]}}\n\n",
            serde_json::Value::from(t)
        ))
    };
    let finish = |why: &str| {
        Bytes::from(format!(
            "data: {{\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"{why}\"}}]}}\n\n"
        ))
    };
    let chunks: Vec<Bytes> = if follow_up {
        vec![text(TOOL_REPLY_TEXT), finish("stop")]
    } else {
        let mut chunks = vec![text(TOOL_ASK_TEXT)];
        chunks.extend((0..calls).map(|i| {
            Bytes::from(format!(
                "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"tool_calls\":[{{\"index\":{i},\"id\":\"call_{i}\",\"type\":\"function\",\"function\":{{\"name\":\"{TOOL_NAME}\",\"arguments\":\"{{}}\"}}}}]}}}}]}}\n\n"
            ))
        }));
        chunks.push(finish("tool_calls"));
        chunks
    };
    // The end is stamped when hyper asks for it, i.e. once everything before it is written.
    let end = futures::stream::once(async move {
        if !follow_up {
            let done = clock_us();
            let mut steps = seen.tool_steps.lock().unwrap();
            steps
                .entry(key)
                .or_default()
                .asked_done_us
                .get_or_insert(done);
        }
        Bytes::from_static(END)
    });
    let body = futures::stream::iter(chunks)
        .chain(end)
        .map(Ok::<_, std::io::Error>);
    event_stream(Body::from_stream(body))
}

fn error(code: StatusCode, kind: &str, message: &str, retry_after: Option<u64>) -> Response {
    let body = serde_json::json!({"error": {"type": kind, "code": kind, "message": message}});
    let mut resp = (code, axum::Json(body)).into_response();
    if let Some(secs) = retry_after {
        resp.headers_mut()
            .insert("retry-after", HeaderValue::from(secs));
    }
    resp
}

fn chunk(k: usize) -> Bytes {
    Bytes::from(format!(
        "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{k}@{} \"}}}}]}}\n\n",
        clock_us()
    ))
}

const END: &[u8] = b"data: {\"choices\":[],\"usage\":{\"total_tokens\":7}}\n\ndata: [DONE]\n\n";

/// `n` chunks made by `chunk(k)`, every `every` (or as fast as the connection takes them).
fn stream(
    n: usize,
    every: Duration,
    chunk: impl Fn(usize) -> Bytes + Send + Sync + Clone + 'static,
) -> Response {
    let body = if every.is_zero() {
        // As fast as the connection takes them: each chunk is stamped when hyper asks for it.
        futures::stream::iter(0..n)
            .map(chunk)
            .chain(futures::stream::once(async { Bytes::from_static(END) }))
            .map(Ok::<_, std::io::Error>)
            .boxed()
    } else {
        // A fixed schedule (delta k at start + (k+1)·every), whatever the reader's pace.
        let start = tokio::time::Instant::now();
        futures::stream::unfold(0usize, move |k| {
            let chunk = chunk.clone();
            async move {
                if k > n {
                    return None;
                }
                if k == n {
                    return Some((Bytes::from_static(END), k + 1));
                }
                tokio::time::sleep_until(start + every * (k as u32 + 1)).await;
                Some((chunk(k), k + 1))
            }
        })
        .map(Ok::<_, std::io::Error>)
        .boxed()
    };
    event_stream(Body::from_stream(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn models_and_delta_texts_round_trip() {
        assert!(matches!(
            answer_for(&stream_model(20, 5)),
            Some(Answer::Stream { n: 20, .. })
        ));
        assert!(matches!(
            answer_for(&status_model(429, 3000)),
            Some(Answer::Status { secs: 3000, .. })
        ));
        assert!(matches!(
            answer_for("status-503-10-7"),
            Some(Answer::Status { secs: 10, .. })
        ));
        assert!(matches!(
            answer_for(&tool_model(1)),
            Some(Answer::Tool { calls: 1 })
        ));
        assert!(matches!(
            answer_for(&markdown_model(30, 1)),
            Some(Answer::Markdown { n: 30, .. })
        ));
        let reply = markdown_reply(5000);
        assert_eq!(reply.len(), 5000);
        assert!(reply.is_ascii() && reply.contains("```rust\n") && reply.contains("  - "));
        assert!(answer_for("gpt-4o").is_none());
        assert_eq!(parse_delta("12@3456 "), Some((12, 3456)));
        assert_eq!(parse_delta("x"), None);
    }
}
