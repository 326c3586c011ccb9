//! `GET /sessions/:sid/events`: Server-Sent Events, resumable with `Last-Event-ID` (or
//! `?last_event_id=`). Each frame is rendered once by the hub and shared by every subscriber.
use super::AppState;
use crate::error::{Error, Result};
use crate::events::bytes_frame::{render, Frame};
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use std::convert::Infallible;
use std::time::Duration;
use tokio::sync::broadcast::error::RecvError;

const KEEP_ALIVE: Duration = Duration::from_secs(15);

#[derive(serde::Deserialize)]
pub struct ResumeQuery {
    last_event_id: Option<String>,
}

pub async fn events(
    State(state): State<AppState>,
    Path(sid): Path<String>,
    Query(q): Query<ResumeQuery>,
    headers: HeaderMap,
) -> Result<Response> {
    let raw = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .or(q.last_event_id);
    let after = match raw.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(s) => Some(
            s.parse::<i64>()
                .map_err(|_| Error::invalid(format!("Last-Event-ID {s:?} is not an event id")))?,
        ),
    };
    state.engine.store().session(&sid).await?;
    let hub = state.engine.hub().clone();
    let sub = hub.subscribe(&sid, after);
    let mut first: Vec<Frame> = Vec::new();
    let mut last = after.unwrap_or(i64::MIN);
    if let Some((from, below)) = sub.from_store {
        hub.flush().await;
        for e in hub.store().events_between(&sid, from, below).await? {
            last = e.id;
            first.push(render(e.id, e.name, &e.data));
        }
    }
    for e in &sub.backlog {
        if e.logged.id > last {
            last = e.logged.id;
            first.push(e.frame.clone());
        }
    }
    // `retry:` tells EventSource to reconnect quickly after a drop.
    first.insert(0, Frame::from_static(b"retry: 1000\n\n"));
    let live = futures::stream::unfold((sub.live, last), |(mut rx, last)| async move {
        loop {
            match tokio::time::timeout(KEEP_ALIVE, rx.recv()).await {
                Err(_) => return Some((Frame::from_static(b": keep-alive\n\n"), (rx, last))),
                Ok(Ok(e)) if e.logged.id > last => {
                    let id = e.logged.id;
                    return Some((e.frame.clone(), (rx, id)));
                }
                Ok(Ok(_)) => continue,
                // Too slow to keep up: end the stream; EventSource resumes from its last id.
                Ok(Err(RecvError::Lagged(_))) | Ok(Err(RecvError::Closed)) => return None,
            }
        }
    });
    // Ends when the server stops. One wait per stream, not one per frame: every stream
    // shares the hub's token, so a per-frame wait took its lock twice for every frame.
    let live = live.take_until(async move { hub.closed().await });
    let body = futures::stream::iter(first)
        .chain(live)
        .map(Ok::<_, Infallible>);
    let mut resp = Body::from_stream(body).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(resp)
}
