//! A fast fake OpenAI-compatible provider on loopback, so the provider is never the
//! bottleneck. The request's model picks the answer (so one fake serves every benchmark and
//! the direct client asks it exactly what Mulligan asks it):
//!
//! - `stream-N-MS`: N deltas, one every MS milliseconds on a fixed schedule (0: as fast as
//!   the connection takes them), then usage and `[DONE]`. Delta `k` (0-based) has the text
//!   `"k@T "`, T being when it was sent in microseconds on [`clock_us`], so a client in this
//!   process can check order and loss and measure each delta's transit time.
//! - `status-CODE-SECS`: answers CODE with `Retry-After: SECS` and an OpenAI error body.
//!
//! Anything after a third `-` is a tag that only makes the model (a cooldown's key) new.
//!
//! Every request is counted per model ([`Fake::requests`]).
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::serve::ListenerExt;
use axum::Router;
use futures::StreamExt;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};
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

/// The model that makes the fake answer `code` with `Retry-After: secs`.
pub fn status_model(code: u16, secs: u64) -> String {
    format!("status-{code}-{secs}")
}

/// The index and send time (µs) a delta's text carries.
pub fn parse_delta(text: &str) -> Option<(usize, u64)> {
    let (k, t) = text.trim_end().split_once('@')?;
    Some((k.parse().ok()?, t.parse().ok()?))
}

enum Answer {
    Stream { n: usize, every: Duration },
    Status { code: StatusCode, secs: u64 },
}

fn answer_for(model: &str) -> Option<Answer> {
    let mut parts = model.split('-');
    let kind = parts.next()?;
    let a: u64 = parts.next()?.parse().ok()?;
    let b: u64 = parts.next()?.parse().ok()?;
    match kind {
        "stream" => Some(Answer::Stream {
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

type Counts = Arc<Mutex<HashMap<String, u64>>>;

pub struct Fake {
    /// Base URL, e.g. `http://127.0.0.1:PORT/v1`.
    pub url: String,
    counts: Counts,
    task: tokio::task::JoinHandle<()>,
}

impl Fake {
    pub async fn start() -> std::io::Result<Fake> {
        LazyLock::force(&EPOCH);
        let counts: Counts = Arc::default();
        let app = Router::new()
            .route("/v1/chat/completions", post(chat))
            .with_state(counts.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}/v1", listener.local_addr()?);
        let listener = listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Fake { url, counts, task })
    }

    /// How many requests asked for `model` so far.
    pub fn requests(&self, model: &str) -> u64 {
        self.counts.lock().unwrap().get(model).copied().unwrap_or(0)
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn chat(State(counts): State<Counts>, body: Bytes) -> Response {
    let model = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v.get("model")?.as_str().map(str::to_string))
        .unwrap_or_default();
    *counts.lock().unwrap().entry(model.clone()).or_default() += 1;
    match answer_for(&model) {
        None => error(StatusCode::NOT_FOUND, "model_not_found", &model, None),
        Some(Answer::Status { code, secs }) => {
            error(code, "bench_status", "scripted failure", Some(secs))
        }
        Some(Answer::Stream { n, every }) => stream(n, every),
    }
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

fn stream(n: usize, every: Duration) -> Response {
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
        futures::stream::unfold(0usize, move |k| async move {
            if k > n {
                return None;
            }
            if k == n {
                return Some((Bytes::from_static(END), k + 1));
            }
            tokio::time::sleep_until(start + every * (k as u32 + 1)).await;
            Some((chunk(k), k + 1))
        })
        .map(Ok::<_, std::io::Error>)
        .boxed()
    };
    let mut resp = Body::from_stream(body).into_response();
    resp.headers_mut().insert(
        "content-type",
        HeaderValue::from_static("text/event-stream"),
    );
    resp
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
        assert!(answer_for("gpt-4o").is_none());
        assert_eq!(parse_delta("12@3456 "), Some((12, 3456)));
        assert_eq!(parse_delta("x"), None);
    }
}
