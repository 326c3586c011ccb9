//! `GET /sessions/:sid/events`: Server-Sent Events, resumable with `Last-Event-ID` (or
//! `?last_event_id=`). Each frame is rendered once by the hub and shared by every subscriber.
use super::error::{ApiPath, ApiQuery};
use super::AppState;
use crate::error::{Error, Result};
use crate::events::bytes_frame::{render, Frame};
use crate::events::{EventHub, Published, Subscription};
use crate::wake::WhenWoken;
use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use std::convert::Infallible;
use std::sync::Arc;
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
    ApiPath(sid): ApiPath<String>,
    ApiQuery(q): ApiQuery<ResumeQuery>,
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
    // `retry:` tells EventSource to reconnect quickly after a drop.
    let mut first = vec![Frame::from_static(b"retry: 1000\n\n")];
    let mut last = after.unwrap_or(i64::MIN);
    let rx = backlog(&hub, &sid, sub, &mut last, &mut first).await?;
    let live = Live {
        rx,
        last,
        keep_alive: WhenWoken::new(tokio::time::sleep(KEEP_ALIVE)),
        lagged: false,
        hub: hub.clone(),
        sid,
    };
    let live = futures::stream::unfold(live, Live::next);
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

/// Puts a subscription's past events after `last` in `frames` (the store's range first, then
/// the hub's window) and answers its live feed; `last` becomes the last id put.
async fn backlog(
    hub: &EventHub,
    sid: &str,
    sub: Subscription,
    last: &mut i64,
    frames: &mut Vec<Frame>,
) -> Result<broadcast::Receiver<Arc<Published>>> {
    if let Some((from, below)) = sub.from_store {
        hub.flush().await;
        for e in hub.store().events_between(sid, from, below).await? {
            *last = e.id;
            frames.push(render(e.id, e.name, &e.data));
        }
        // Several instances log no deltas: a reply streaming across the range read from the
        // log comes as a snapshot, its text so far with its `delta_seq`, and the deltas after
        // it follow from memory (a client skips those the snapshot holds). Under the id of
        // the last event before it, so a resume from there gets the snapshot again.
        if hub.mode() == crate::events::Mode::Shared {
            if let Some(m) = hub.store().streaming_reply(sid).await? {
                let m = crate::engine::overlay_mirrored(hub, m);
                let data = serde_json::to_string(&m).unwrap_or_default();
                frames.push(render((*last).max(0), "message", &data));
            }
        }
    }
    for e in &sub.backlog {
        if e.id() > *last {
            *last = e.id();
            frames.push(e.frame());
        }
    }
    Ok(sub.live)
}

/// A subscriber's live feed: frames after `last`, those already waiting joined into one write,
/// and a keep-alive comment every 15 s (one timer per stream, not one per frame). A
/// subscriber that falls behind the session's ring catches up from the hub's window (or the
/// store) in place: its stream goes on without a reconnect.
struct Live {
    rx: broadcast::Receiver<Arc<Published>>,
    last: i64,
    /// Polled only when it fires, not on each frame's wake-up.
    keep_alive: WhenWoken<tokio::time::Sleep>,
    /// Fell behind the ring: catch up before the next frame.
    lagged: bool,
    hub: EventHub,
    sid: String,
}

impl Live {
    /// The events missed while behind, as one frame, and a new place in the ring. `None`: the
    /// store could not be read (the stream ends; EventSource resumes from its last id).
    async fn catch_up(&mut self) -> Option<Frame> {
        self.lagged = false;
        let sub = self.hub.subscribe(&self.sid, Some(self.last));
        let mut frames = Vec::new();
        match backlog(&self.hub, &self.sid, sub, &mut self.last, &mut frames).await {
            Ok(rx) => self.rx = rx,
            Err(e) => {
                tracing::warn!(session = %self.sid, error = %e, "a lagging subscriber could not catch up; its stream ends");
                return None;
            }
        }
        let mut joined = Vec::with_capacity(frames.iter().map(|f| f.len()).sum());
        for f in &frames {
            joined.extend_from_slice(f);
        }
        Some(Frame::from(joined))
    }

    async fn next(mut self) -> Option<(Frame, Live)> {
        if self.lagged {
            let frame = self.catch_up().await?;
            return Some((frame, self));
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
                    Err(RecvError::Lagged(_)) => {
                        let frame = self.catch_up().await?;
                        return Some((frame, self));
                    }
                    Err(RecvError::Closed) => return None,
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

#[cfg(test)]
mod tests {
    use super::*;
    use app::wire::{Delta, Event};

    /// A subscriber that falls several rings behind (a slow client, a busy machine) gets every
    /// event it missed, in order and once, and its stream goes on: no reconnect.
    #[tokio::test]
    async fn a_lagging_subscriber_catches_up_in_place() {
        let hub = crate::events::test_hub().await;
        let sid = "s_slow".to_string();
        let sub = hub.subscribe(&sid, None);
        let delta = |seq: u64| {
            Event::Delta(Delta {
                run_id: "r".into(),
                message_id: "m".into(),
                seq,
                text: format!("t{seq}"),
                step: 1,
            })
        };
        let before = hub.last_id();
        let behind = 5 * crate::events::RING as u64;
        for seq in 1..=behind {
            hub.publish(&sid, &delta(seq));
        }
        let live = Live {
            rx: sub.live,
            last: before,
            keep_alive: WhenWoken::new(tokio::time::sleep(KEEP_ALIVE)),
            lagged: false,
            hub: hub.clone(),
            sid: sid.clone(),
        };
        let mut live = Box::pin(futures::stream::unfold(live, Live::next));
        let mut ids = Vec::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while (ids.len() as u64) < behind + 1 {
            if ids.len() as u64 == behind {
                // Caught up: a new event still comes live.
                hub.publish(&sid, &delta(behind + 1));
            }
            let frame = tokio::time::timeout_at(deadline, live.next())
                .await
                .expect("the caught-up stream went quiet")
                .expect("the lagging stream ended instead of catching up");
            let text = String::from_utf8(frame.to_vec()).unwrap();
            ids.extend(
                text.lines()
                    .filter_map(|l| l.strip_prefix("id: "))
                    .map(|id| id.parse::<i64>().unwrap()),
            );
        }
        let want: Vec<i64> = (before + 1..=before + behind as i64 + 1).collect();
        assert_eq!(ids, want, "missed, repeated or reordered events");
    }
}
