//! The event log: every event gets the next id, goes out at once to the session's SSE
//! subscribers as one shared, pre-rendered frame, and is written to the store in batches.
use crate::store::{LoggedEvent, Store};
use app::wire::Event;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{broadcast, mpsc};

/// How many recent events per session a resume can be served from memory.
const RECENT: usize = 4096;
/// How often the writer flushes the batch of new events to the store.
const FLUSH_EVERY: Duration = Duration::from_millis(100);

/// One published event: the logged fields plus its SSE frame, rendered once.
#[derive(Debug)]
pub struct Published {
    pub logged: LoggedEvent,
    pub frame: bytes_frame::Frame,
}

pub mod bytes_frame {
    //! An SSE frame (`id:`, `event:`, `data:` lines), rendered once and shared by subscribers.
    pub type Frame = axum::body::Bytes;

    pub fn render(id: i64, name: &str, data: &str) -> Frame {
        Frame::from(format!("id: {id}\nevent: {name}\ndata: {data}\n\n"))
    }
}

struct Channel {
    tx: broadcast::Sender<Arc<Published>>,
    recent: VecDeque<Arc<Published>>,
    /// Events of this session with ids below this are not in `recent`: read them from the store.
    floor: i64,
}

struct Inner {
    next_id: i64,
    channels: HashMap<String, Channel>,
}

#[derive(Clone)]
pub struct EventHub {
    inner: Arc<Mutex<Inner>>,
    writer: mpsc::UnboundedSender<Write>,
    store: Store,
    closing: tokio_util::sync::CancellationToken,
}

/// What a subscriber gets: the store range to read first, the events in memory, then the live feed.
pub struct Subscription {
    /// Read `store.events_between(session, after, before)` first when set.
    pub from_store: Option<(i64, i64)>,
    pub backlog: Vec<Arc<Published>>,
    pub live: broadcast::Receiver<Arc<Published>>,
}

impl EventHub {
    /// Starts the hub and its batch writer; ids continue after the store's last event.
    pub async fn start(
        store: Store,
    ) -> crate::error::Result<(EventHub, tokio::task::JoinHandle<()>)> {
        let next_id = store.max_event_id().await? + 1;
        let (writer, rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(write_batches(store.clone(), rx));
        let hub = EventHub {
            inner: Arc::new(Mutex::new(Inner {
                next_id,
                channels: HashMap::new(),
            })),
            writer,
            store,
            closing: Default::default(),
        };
        Ok((hub, task))
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Ends every subscriber's stream (the server is stopping).
    pub fn close_streams(&self) {
        self.closing.cancel();
    }

    /// Resolves when the server is stopping.
    pub async fn closed(&self) {
        self.closing.cancelled().await
    }

    /// Waits until every event published so far is in the store.
    pub async fn flush(&self) {
        let (done, wait) = tokio::sync::oneshot::channel();
        if self.writer.send(Write::Flush(done)).is_ok() {
            let _ = wait.await;
        }
    }

    /// The id of the last event published so far.
    pub fn last_id(&self) -> i64 {
        self.inner.lock().expect("event hub lock").next_id - 1
    }

    /// Publishes one event of a session: id, in-memory log, subscribers, batch writer.
    pub fn publish(&self, session_id: &str, event: &Event) -> i64 {
        let name = event.name();
        let data = event.data_json();
        let mut inner = self.inner.lock().expect("event hub lock");
        let id = inner.next_id;
        inner.next_id += 1;
        let published = Arc::new(Published {
            frame: bytes_frame::render(id, name, &data),
            logged: LoggedEvent {
                id,
                session_id: session_id.to_string(),
                name,
                data,
            },
        });
        let chan = channel(&mut inner, session_id, id);
        if chan.recent.len() == RECENT {
            if let Some(old) = chan.recent.pop_front() {
                chan.floor = old.logged.id + 1;
            }
        }
        chan.recent.push_back(published.clone());
        let _ = chan.tx.send(published.clone());
        drop(inner);
        let _ = self.writer.send(Write::Event(published));
        id
    }

    /// Subscribes to a session's events after `after` (`None`: only new ones).
    pub fn subscribe(&self, session_id: &str, after: Option<i64>) -> Subscription {
        let mut inner = self.inner.lock().expect("event hub lock");
        let next = inner.next_id;
        let chan = channel(&mut inner, session_id, next);
        let live = chan.tx.subscribe();
        let Some(after) = after else {
            return Subscription {
                from_store: None,
                backlog: Vec::new(),
                live,
            };
        };
        let backlog = chan
            .recent
            .iter()
            .filter(|e| e.logged.id > after)
            .cloned()
            .collect();
        let from_store = (after + 1 < chan.floor).then_some((after, chan.floor));
        Subscription {
            from_store,
            backlog,
            live,
        }
    }
}

fn channel<'a>(inner: &'a mut Inner, session_id: &str, floor: i64) -> &'a mut Channel {
    inner
        .channels
        .entry(session_id.to_string())
        .or_insert_with(|| Channel {
            tx: broadcast::channel(1024).0,
            recent: VecDeque::new(),
            floor,
        })
}

enum Write {
    Event(Arc<Published>),
    Flush(tokio::sync::oneshot::Sender<()>),
}

/// Writes published events to the store, one transaction per batch, until the hub is dropped.
async fn write_batches(store: Store, mut rx: mpsc::UnboundedReceiver<Write>) {
    let mut batch: Vec<Arc<Published>> = Vec::new();
    let mut waiting = Vec::new();
    fn take(
        w: Write,
        batch: &mut Vec<Arc<Published>>,
        waiting: &mut Vec<tokio::sync::oneshot::Sender<()>>,
    ) {
        match w {
            Write::Event(e) => batch.push(e),
            Write::Flush(done) => waiting.push(done),
        }
    }
    while let Some(first) = rx.recv().await {
        take(first, &mut batch, &mut waiting);
        if waiting.is_empty() {
            tokio::time::sleep(FLUSH_EVERY).await;
        }
        while let Ok(w) = rx.try_recv() {
            take(w, &mut batch, &mut waiting);
        }
        if !batch.is_empty() {
            let logged: Vec<&LoggedEvent> = batch.iter().map(|p| &p.logged).collect();
            if let Err(e) = store.append_events(&logged).await {
                tracing::error!(error = %e, count = logged.len(), "could not write events to the log");
            }
            batch.clear();
        }
        for done in waiting.drain(..) {
            let _ = done.send(());
        }
    }
}
