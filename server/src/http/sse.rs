//! `GET /sessions/:sid/events`: Server-Sent Events, resumable with `Last-Event-ID` (or
//! `?last_event_id=`), and `GET /events`, several sessions' in one stream. Each frame is
//! rendered once by the hub and shared by every subscriber.
use super::error::{ApiPath, ApiQuery};
use super::AppState;
use crate::error::{Error, Result};
use crate::events::bytes_frame::{render, Frame};
use crate::events::{EventHub, Published, Recent, Subscription};
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
    ApiPath(sid): ApiPath<app::wire::SessionId>,
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
    let (owed, live) = open(&state, sid, after).await?;
    // `retry:` tells EventSource to reconnect quickly after a drop.
    let mut first = vec![Frame::from_static(b"retry: 1000\n\n")];
    first.extend(owed);
    let live = futures::stream::unfold(live, Live::next);
    Ok(sse_response(first, live, state.engine.hub().clone()))
}

#[derive(serde::Deserialize)]
pub struct FollowQuery {
    sessions: Option<String>,
}

/// `GET /events?sessions=ID:LAST_EVENT_ID,…`: several sessions' events in one stream, each
/// session's resumed after its own id. A `session_id` marker names the session of the
/// events after it; the frames themselves are the ones each session's subscribers share.
/// A client resumes by opening it again with its own ids (`Last-Event-ID` is not read: one
/// id cannot say where each session stands).
pub async fn follow(
    State(state): State<AppState>,
    ApiQuery(q): ApiQuery<FollowQuery>,
) -> Result<Response> {
    let list =
        app::wire::Following::parse(q.sessions.as_deref().unwrap_or("")).map_err(Error::invalid)?;
    let mut first = vec![Frame::from_static(b"retry: 1000\n\n")];
    let mut markers = Vec::with_capacity(list.0.len());
    let mut feeds = Vec::with_capacity(list.0.len());
    let mut current = None;
    for (n, (sid, after)) in list.0.into_iter().enumerate() {
        let name = serde_json::to_string(sid.as_str()).unwrap_or_default();
        let marker = Frame::from(format!(
            "event: {}\ndata: {name}\n\n",
            app::wire::SESSION_MARKER
        ));
        let (owed, live) = open(&state, sid, after).await?;
        if let Some(owed) = owed {
            first.push(marker.clone());
            first.push(owed);
            current = Some(n);
        }
        markers.push(marker);
        // A feed that ends (its session's past could not be read) ends the stream with a
        // `None`, so the client opens it again, rather than the session going quiet.
        feeds.push(
            futures::stream::unfold(live, Live::next)
                .map(move |f| Some((n, f)))
                .chain(futures::stream::once(futures::future::ready(None)))
                .boxed(),
        );
    }
    let live = futures::stream::select_all(feeds)
        .take_while(|item| futures::future::ready(item.is_some()))
        .filter_map(move |item| {
            let Some((n, frame)) = item else {
                return futures::future::ready(None);
            };
            let frame = if frame.starts_with(b":") {
                // One keep-alive for the stream, not one per session.
                (n == 0).then_some(frame)
            } else if current == Some(n) {
                Some(frame)
            } else {
                current = Some(n);
                let mut joined = Vec::with_capacity(markers[n].len() + frame.len());
                joined.extend_from_slice(&markers[n]);
                joined.extend_from_slice(&frame);
                Some(Frame::from(joined))
            };
            futures::future::ready(frame)
        });
    Ok(sse_response(first, live, state.engine.hub().clone()))
}

/// A session's stream after `after`: the first page of what it is owed, read here, so a
/// store that cannot be read answers an error rather than a stream that ends at once, and
/// its live feed. `not_found` for a session that does not exist.
async fn open(
    state: &AppState,
    sid: app::wire::SessionId,
    after: Option<i64>,
) -> Result<(Option<Frame>, Live)> {
    state.engine.store().session_exists(&sid).await?;
    let hub = state.engine.hub().clone();
    // An id past every id given out resumes after everything there is: taken as is, it
    // would hide every event to come below it.
    let after = match after {
        Some(a) if a > hub.last_id() => Some(a.min(hub.head().await?)),
        other => other,
    };
    let (rx, owed) = owed_by(&hub, hub.subscribe(&sid, after)).await;
    let mut live = Live {
        rx,
        last: after.unwrap_or(i64::MIN),
        owed,
        keep_alive: WhenWoken::new(tokio::time::sleep(KEEP_ALIVE)),
        lagged: false,
        hub,
        sid,
    };
    let owed = live.owed_page().await?;
    Ok((owed, live))
}

/// The `text/event-stream` answer: `first`, then `live` until the server stops.
fn sse_response(
    first: Vec<Frame>,
    live: impl futures::Stream<Item = Frame> + Send + 'static,
    hub: EventHub,
) -> Response {
    // One wait per stream, polled only when woken: every stream shares the hub's token, and
    // polling it takes its lock.
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
    resp
}

/// Events of the store's log read per page of a resume (a long session is never read, nor
/// held, whole: the next page is read when the client took the last one).
const STORE_PAGE: i64 = 256;

/// What a subscriber is owed before its live feed: the store's range below `below`, page
/// by page (after it, on a shared log, the streaming reply's snapshot), then the hub's window.
#[derive(Default)]
struct Owed {
    below: Option<i64>,
    backlog: Vec<Recent>,
}

/// A subscription's live feed, and its past events as owed.
async fn owed_by(hub: &EventHub, sub: Subscription) -> (broadcast::Receiver<Arc<Published>>, Owed) {
    if sub.from_store.is_some() {
        // What this instance published before is in the log before it is read.
        hub.flush().await;
    }
    let owed = Owed {
        below: sub.from_store.map(|(_, below)| below),
        backlog: sub.backlog,
    };
    (sub.live, owed)
}

/// A subscriber's live feed: frames after `last`, those already waiting joined into one write,
/// and a keep-alive comment every 15 s (one timer per stream, not one per frame). A
/// subscriber that falls behind the session's ring catches up from the hub's window (or the
/// store) in place: its stream goes on without a reconnect.
struct Live {
    rx: broadcast::Receiver<Arc<Published>>,
    last: i64,
    /// Past events still to send, before the live feed.
    owed: Owed,
    /// Polled only when it fires, not on each frame's wake-up.
    keep_alive: WhenWoken<tokio::time::Sleep>,
    /// Fell behind the ring: catch up before the next frame.
    lagged: bool,
    hub: EventHub,
    sid: app::wire::SessionId,
}

impl Live {
    /// The next owed frames after `last`, joined: a page of the store's range (with the
    /// snapshot after its last page), else the hub's window; `None` when nothing is owed.
    async fn owed_page(&mut self) -> Result<Option<Frame>> {
        let mut frames = Vec::new();
        while frames.is_empty() {
            if let Some(below) = self.owed.below {
                let page = self
                    .hub
                    .store()
                    .events_between(&self.sid, self.last, below, STORE_PAGE)
                    .await?;
                if page.len() < STORE_PAGE as usize {
                    self.owed.below = None;
                }
                for e in page {
                    self.last = e.id;
                    frames.push(render(e.id, e.name, &e.data));
                }
                if self.owed.below.is_none() {
                    self.snapshot(&mut frames).await?;
                }
            } else if !self.owed.backlog.is_empty() {
                for e in std::mem::take(&mut self.owed.backlog) {
                    if e.id() > self.last {
                        self.last = e.id();
                        frames.push(e.frame());
                    }
                }
            } else {
                return Ok(None);
            }
        }
        Ok(Some(join(&frames)))
    }

    /// Several instances log no deltas: a reply streaming across the range read from the
    /// log comes as a snapshot, its text so far with its `delta_seq`, and the deltas after
    /// it follow from memory (a client skips those the snapshot holds). Under the id of the
    /// last event before it, so a resume from there gets the snapshot again.
    async fn snapshot(&self, frames: &mut Vec<Frame>) -> Result<()> {
        if self.hub.mode() != crate::events::Mode::Shared {
            return Ok(());
        }
        if let Some(m) = self.hub.store().streaming_reply(&self.sid).await? {
            let m = crate::engine::overlay_mirrored(&self.hub, m);
            let data = serde_json::to_string(&m).unwrap_or_default();
            frames.push(render(self.last.max(0), "message", &data));
        }
        Ok(())
    }

    /// Starts over after the events missed while behind: they are owed from here (the
    /// window, or the store below it), then a new place in the ring.
    async fn catch_up(&mut self) {
        self.lagged = false;
        let sub = self.hub.subscribe(&self.sid, Some(self.last));
        (self.rx, self.owed) = owed_by(&self.hub, sub).await;
    }

    async fn next(mut self) -> Option<(Frame, Live)> {
        loop {
            if self.lagged {
                self.catch_up().await;
            }
            match self.owed_page().await {
                Ok(Some(frame)) => return Some((frame, self)),
                Ok(None) => {}
                Err(e) => {
                    // The stream ends; EventSource resumes from its last id.
                    tracing::warn!(session_id = %self.sid, error = %e, "a subscriber's past events could not be read; its stream ends");
                    return None;
                }
            }
            let first = loop {
                tokio::select! {
                    biased;
                    got = self.rx.recv() => match got {
                        Ok(e) if e.id > self.last => {
                            self.last = e.id;
                            break Some(e.frame.clone());
                        }
                        Ok(_) => continue,
                        Err(RecvError::Lagged(_)) => {
                            self.lagged = true;
                            break None;
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
            let Some(first) = first else { continue };
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
            return Some((joined.map_or(first, Frame::from), self));
        }
    }
}

/// Frames joined into one write.
fn join(frames: &[Frame]) -> Frame {
    if let [one] = frames {
        return one.clone();
    }
    let mut joined = Vec::with_capacity(frames.iter().map(|f| f.len()).sum());
    for f in frames {
        joined.extend_from_slice(f);
    }
    Frame::from(joined)
}

#[cfg(test)]
mod tests {
    use super::*;
    use app::wire::{Delta, Event};

    /// A resume over a long stretch of the log reads it a page at a time, each page one
    /// write: every event once, in order.
    #[tokio::test]
    async fn a_long_resume_from_the_log_comes_page_by_page() {
        let first = crate::events::test_hub().await;
        let store = first.store().clone();
        let n = 3 * STORE_PAGE + 7;
        let from = first.last_id();
        let rows: Vec<crate::store::LoggedEvent> = (1..=n)
            .map(|i| crate::store::LoggedEvent {
                id: from + i,
                session_id: app::wire::SessionId::new("s_long"),
                name: "session",
                data: format!("{{\"n\":{i}}}"),
            })
            .collect();
        store
            .append_events(&rows.iter().collect::<Vec<_>>())
            .await
            .unwrap();
        // A restart: nothing of the session in memory.
        let (hub, _writer) = EventHub::start(store).await.unwrap();
        let sid = app::wire::SessionId::new("s_long");
        let (rx, owed) = owed_by(&hub, hub.subscribe(&sid, Some(from))).await;
        let live = Live {
            rx,
            last: from,
            owed,
            keep_alive: WhenWoken::new(tokio::time::sleep(KEEP_ALIVE)),
            lagged: false,
            hub: hub.clone(),
            sid,
        };
        let mut live = Box::pin(futures::stream::unfold(live, Live::next));
        let (mut ids, mut writes) = (Vec::new(), 0);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while (ids.len() as i64) < n {
            let frame = tokio::time::timeout_at(deadline, live.next())
                .await
                .expect("the resume went quiet")
                .expect("the resume ended");
            writes += 1;
            let text = String::from_utf8(frame.to_vec()).unwrap();
            ids.extend(
                text.lines()
                    .filter_map(|l| l.strip_prefix("id: "))
                    .map(|id| id.parse::<i64>().unwrap()),
            );
        }
        assert_eq!(ids, (from + 1..=from + n).collect::<Vec<_>>());
        assert_eq!(writes, 4, "one write per page");
    }

    /// A subscriber that falls several rings behind (a slow client, a busy machine) gets every
    /// event it missed, in order and once, and its stream goes on: no reconnect.
    #[tokio::test]
    async fn a_lagging_subscriber_catches_up_in_place() {
        let hub = crate::events::test_hub().await;
        let sid = app::wire::SessionId::new("s_slow");
        let sub = hub.subscribe(&sid, None);
        let delta = |seq: u64| {
            Event::Delta(Delta {
                run_id: app::wire::RunId::new("r"),
                message_id: app::wire::MessageId::new("m"),
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
            owed: Owed::default(),
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
