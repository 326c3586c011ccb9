//! A session's event stream as a test reads it, with an SSE parser independent of the server's.
use app::wire::Event;
use eventsource_stream::Eventsource;
use futures::StreamExt;
use std::time::Duration;

type EventBox = futures::stream::BoxStream<
    'static,
    Result<eventsource_stream::Event, eventsource_stream::EventStreamError<reqwest::Error>>,
>;

/// A session's event stream (or several sessions' stream) as the contract's events.
pub struct Sse {
    inner: EventBox,
    /// On a stream of several sessions, the session of the last marker.
    session: Option<String>,
}

impl Sse {
    /// The stream of an answered `GET …/events`.
    pub(crate) fn of(resp: reqwest::Response) -> Sse {
        Sse {
            inner: resp.bytes_stream().eventsource().boxed(),
            session: None,
        }
    }

    /// The next event with its id; panics after `within`.
    pub async fn next(&mut self, within: Duration) -> (i64, Event) {
        let (_, id, event) = self.next_marked(within).await;
        (id, event)
    }

    /// The next event with the session its marker named (`None` before any marker, as on
    /// a single session's stream) and its id; panics after `within`.
    pub async fn next_marked(&mut self, within: Duration) -> (Option<String>, i64, Event) {
        loop {
            let ev = tokio::time::timeout(within, self.inner.next())
                .await
                .expect("an event in time")
                .expect("the stream is open")
                .expect("a well-formed event");
            if ev.event == app::wire::SESSION_MARKER {
                let sid: String = serde_json::from_str(&ev.data).expect("a marker names a session");
                self.session = Some(sid);
                continue;
            }
            if let Some(parsed) = Event::parse(&ev.event, &ev.data) {
                return (
                    self.session.clone(),
                    ev.id.parse().unwrap(),
                    parsed.unwrap(),
                );
            }
        }
    }

    /// Events until `done` says stop (inclusive).
    pub async fn until(
        &mut self,
        within: Duration,
        mut done: impl FnMut(&Event) -> bool,
    ) -> Vec<(i64, Event)> {
        let mut out = Vec::new();
        loop {
            let e = self.next(within).await;
            let stop = done(&e.1);
            out.push(e);
            if stop {
                return out;
            }
        }
    }
}

/// True for a `run` event of `rid` that has ended.
pub fn run_ended(rid: &(impl std::fmt::Display + ?Sized)) -> impl FnMut(&Event) -> bool {
    let rid = rid.to_string();
    move |e| matches!(e, Event::Run(r) if r.id.as_str() == rid && !r.status.is_active())
}
