//! What the demo sends back, in the OpenAI shape: word deltas streamed (finished or cut), a
//! stream ending in a tool call, or an error body with its status.
use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use std::time::Duration;

/// Streams `deltas`, then one chunk asking for a tool call, then `[DONE]`.
pub(super) fn stream_with_call(
    every: Duration,
    deltas: Vec<String>,
    call: serde_json::Value,
) -> Response {
    let mut frames: Vec<String> = deltas
        .into_iter()
        .filter(|d| !d.is_empty())
        .map(|text| {
            let chunk = serde_json::json!({"choices": [{"index": 0, "delta": {"content": text}}]});
            format!("data: {chunk}\n\n")
        })
        .collect();
    frames.push(format!("data: {call}\n\n"));
    frames.push("data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n".into());
    let body = futures::stream::unfold(frames.into_iter(), move |mut it| async move {
        let frame = it.next()?;
        tokio::time::sleep(every).await;
        Some((Ok::<_, std::io::Error>(Bytes::from(frame)), it))
    });
    let mut resp = Body::from_stream(body).into_response();
    resp.headers_mut().insert(
        "content-type",
        HeaderValue::from_static("text/event-stream"),
    );
    resp
}

/// Splits text into word-sized deltas that concatenate back to it.
pub(super) fn words(text: &str) -> Vec<String> {
    text.split_inclusive(' ').map(str::to_string).collect()
}

pub(super) fn stream(every: Duration, deltas: Vec<String>, finish: bool) -> Response {
    let total = deltas.len() as u64;
    let body = futures::stream::unfold(
        (deltas.into_iter(), 0u8),
        move |(mut it, stage)| async move {
            if stage == 0 {
                if let Some(text) = it.next() {
                    tokio::time::sleep(every).await;
                    let chunk =
                        serde_json::json!({"choices": [{"index": 0, "delta": {"content": text}}]});
                    return Some((
                        Ok::<_, std::io::Error>(Bytes::from(format!("data: {chunk}\n\n"))),
                        (it, 0),
                    ));
                }
                if !finish {
                    // Cut the connection mid-reply, as a dropped upstream would.
                    return Some((
                        Err(std::io::Error::other("demo-drop cut the stream")),
                        (it, 2),
                    ));
                }
                let usage = serde_json::json!({"choices": [], "usage": {"total_tokens": total}});
                return Some((
                    Ok(Bytes::from(format!("data: {usage}\n\ndata: [DONE]\n\n"))),
                    (it, 2),
                ));
            }
            None
        },
    );
    let mut resp = Body::from_stream(body).into_response();
    resp.headers_mut().insert(
        "content-type",
        HeaderValue::from_static("text/event-stream"),
    );
    resp
}

pub(super) fn error(
    status: u16,
    headers: &[(&'static str, &'static str)],
    kind: &str,
    message: &str,
) -> Response {
    let mut resp = error_coded(status, kind, kind, message);
    let h: &mut HeaderMap = resp.headers_mut();
    for (k, v) in headers {
        h.insert(*k, HeaderValue::from_static(v));
    }
    resp
}

pub(super) fn error_coded(status: u16, kind: &str, code: &str, message: &str) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = serde_json::json!({"error": {"type": kind, "code": code, "message": message}});
    (status, Json(body)).into_response()
}
