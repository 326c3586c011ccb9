//! `GET /sessions/:sid/events`: Server-Sent Events, resumable with `Last-Event-ID` (or
//! `?last_event_id=`). Each frame is rendered once by the hub and shared by every subscriber.
use super::AppState;
use crate::error::{Error, Result};
use crate::events::bytes_frame::{render, Frame};
use crate::wake::WhenWoken;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use std::convert::Infallible;
use std::time::Duration;
use tokio::sync::broadcast::{self, error::RecvError, error::TryRecvError};

const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// A write carries every frame already waiting, up to about this many bytes.
const BATCH_BYTES: usize = 64 * 1024;

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
    state.engine.store().session_exists(&sid).await?;
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
        if e.id > last {
            last = e.id;
            first.push(e.frame.clone());
        }
    }
    // `retry:` tells EventSource to reconnect quickly after a drop.
    first.insert(0, Frame::from_static(b"retry: 1000\n\n"));
    let live = futures::stream::unfold(Live::new(sub.live, last), Live::next);
    // Ends when the server stops. One wait per stream, polled only when woken: every
    // stream shares the hub's token, and polling it takes its lock.
    let live = live.take_until(WhenWoken::new(async move { hub.closed().await }));
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

/// A subscriber's live feed: frames after `last`, those already waiting joined into one write,
/// and a keep-alive comment every 15 s (one timer per stream, not one per frame).
struct Live {
    rx: broadcast::Receiver<std::sync::Arc<crate::events::Published>>,
    last: i64,
    /// Polled only when it fires, not on each frame's wake-up.
    keep_alive: WhenWoken<tokio::time::Sleep>,
    /// Fell behind the ring: end after this write; EventSource resumes from its last id.
    lagged: bool,
}

impl Live {
    fn new(rx: broadcast::Receiver<std::sync::Arc<crate::events::Published>>, last: i64) -> Live {
        let keep_alive = WhenWoken::new(tokio::time::sleep(KEEP_ALIVE));
        Live {
            rx,
            last,
            keep_alive,
            lagged: false,
        }
    }

    async fn next(mut self) -> Option<(Frame, Live)> {
        if self.lagged {
            return None;
        }
        let first = loop {
            tokio::select! {
                biased;
                got = self.rx.recv() => match got {
                    Ok(e) if e.id > self.last => {
                        self.last = e.id;
                        break e.frame.clone();
                    }
                    Ok(_) => continue,
                    // Too slow to keep up: end the stream; EventSource resumes from its last id.
                    Err(RecvError::Lagged(_)) | Err(RecvError::Closed) => return None,
                },
                () = &mut self.keep_alive => {
                    let next = tokio::time::Instant::now() + KEEP_ALIVE;
                    self.keep_alive.get_mut().reset(next);
                    return Some((Frame::from_static(b": keep-alive\n\n"), self));
                }
            }
        };
        let mut joined: Option<Vec<u8>> = None;
        loop {
            match self.rx.try_recv() {
                Ok(e) if e.id > self.last => {
                    self.last = e.id;
                    let buf = joined.get_or_insert_with(|| {
                        let mut v = Vec::with_capacity(first.len() * 8);
                        v.extend_from_slice(&first);
                        v
                    });
                    buf.extend_from_slice(&e.frame);
                    if buf.len() >= BATCH_BYTES {
                        break;
                    }
                }
                Ok(_) => continue,
                Err(TryRecvError::Lagged(_)) => {
                    self.lagged = true;
                    break;
                }
                Err(TryRecvError::Empty) | Err(TryRecvError::Closed) => break,
            }
        }
        Some((joined.map_or(first, Frame::from), self))
    }
}
