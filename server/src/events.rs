//! The event log: every event gets the next id, goes out to the session's SSE subscribers as
//! one shared, pre-rendered frame, and is written to the store in batches.
//!
//! One instance (SQLite): ids come from this process and events go out at once. Several
//! instances (PostgreSQL, [`Mode::Shared`]): the database's log is the one order; each
//! instance writes its events in batches and every instance's follower feeds its
//! subscribers from the log, woken by `LISTEN`, and mirrors streaming replies' text so a
//! snapshot taken anywhere agrees with the stream.
//!
//! Retention: `delta` events are not kept in the log for ever. Once a run's end is written,
//! the session's delta rows before it are pruned (at once on one instance; after
//! [`SHARED_PRUNE_GRACE`] on a shared log, so every follower has read them); deltas of a run
//! whose end is in the same batch are never written at all. The stored reply and the
//! `message` event published with the run's end carry the whole text, so a resume from the
//! log over a pruned range gets that snapshot instead of the deltas; a resume within the
//! in-memory window ([`RECENT`] events per session) still gets every delta.
use crate::store::{LoggedEvent, Store, EVENTS_CHANNEL};
use app::wire::{Delta, Event, Run, RunStatus};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{broadcast, mpsc};

/// How many recent events per session a resume can be served from memory.
const RECENT: usize = 4096;
/// How often the writer flushes the batch of new events to the store.
const FLUSH_EVERY: Duration = Duration::from_millis(100);
/// Shared log: how long after a run's end its delta rows stay for other instances'
/// followers (which read within a quarter second) before they are pruned.
pub const SHARED_PRUNE_GRACE: Duration = Duration::from_secs(5);
/// A batch the store refused is written again after this, doubling up to `RETRY_CAP`.
const RETRY_FIRST: Duration = Duration::from_millis(50);
const RETRY_CAP: Duration = Duration::from_secs(2);
/// A session's channel with no subscriber and no event for this long is dropped from memory
/// (a later resume reads the store instead).
const IDLE: Duration = Duration::from_secs(60);

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
    /// When the last event was delivered (or the channel made).
    active_at: std::time::Instant,
}

struct Inner {
    /// Local: the next id to give. Shared: one past the last id the follower applied.
    next_id: i64,
    channels: HashMap<String, Channel>,
    /// Shared: the text streamed so far of each streaming reply seen in the log, by run id.
    mirror: HashMap<String, (String, u64)>,
}

/// Where ids and order come from.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mode {
    /// This process numbers events and delivers them at once (one instance).
    Local,
    /// The database's log numbers them; subscribers are fed from it (several instances).
    Shared,
}

#[derive(Clone)]
pub struct EventHub {
    inner: Arc<Mutex<Inner>>,
    writer: mpsc::UnboundedSender<Write>,
    store: Store,
    mode: Mode,
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
    /// Starts the hub and its batch writer (and, on a shared database, its follower); ids
    /// continue after the store's last event.
    pub async fn start(
        store: Store,
    ) -> crate::error::Result<(EventHub, tokio::task::JoinHandle<()>)> {
        let next_id = store.max_event_id().await? + 1;
        let mode = if store.is_shared() {
            Mode::Shared
        } else {
            Mode::Local
        };
        let (writer, rx) = mpsc::unbounded_channel();
        let hub = EventHub {
            inner: Arc::new(Mutex::new(Inner {
                next_id,
                channels: HashMap::new(),
                mirror: HashMap::new(),
            })),
            writer,
            store: store.clone(),
            mode,
            closing: Default::default(),
        };
        tokio::spawn(sweep(Arc::downgrade(&hub.inner)));
        let task = match mode {
            Mode::Local => tokio::spawn(write_batches(store, rx)),
            Mode::Shared => {
                let follower = tokio::spawn(follow(hub.clone(), next_id - 1));
                let writer = tokio::spawn(write_shared(store, rx));
                tokio::spawn(async move {
                    let _ = writer.await;
                    follower.abort();
                })
            }
        };
        Ok((hub, task))
    }

    pub fn mode(&self) -> Mode {
        self.mode
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

    /// The id of the last event delivered to this instance's subscribers so far.
    pub fn last_id(&self) -> i64 {
        self.inner.lock().expect("event hub lock").next_id - 1
    }

    /// A streaming reply's text and delta count as the shared log has delivered them here.
    pub fn mirrored_text(&self, run_id: &str) -> Option<(String, u64)> {
        self.inner
            .lock()
            .expect("event hub lock")
            .mirror
            .get(run_id)
            .cloned()
    }

    /// Publishes one event of a session. Local: numbered, delivered and queued for the log
    /// at once. Shared: queued for the log; the follower delivers it once it is there.
    pub fn publish(&self, session_id: &str, event: &Event) {
        let name = event.name();
        let data = event.data_json();
        let ends_run = matches!(event, Event::Run(r) if !r.status.is_active());
        if self.mode == Mode::Shared {
            let _ = self
                .writer
                .send(Write::Pending(session_id.to_string(), name, data, ends_run));
            return;
        }
        let mut inner = self.inner.lock().expect("event hub lock");
        let id = inner.next_id;
        inner.next_id += 1;
        let published = deliver(
            &mut inner,
            LoggedEvent {
                id,
                session_id: session_id.to_string(),
                name,
                data,
            },
        );
        drop(inner);
        let _ = self.writer.send(Write::Event(published, ends_run));
    }

    /// Delivers events read from the shared log, in order, to this instance's subscribers.
    fn apply(&self, events: Vec<LoggedEvent>) {
        // Parsed outside the lock: what the mirror of streaming replies needs.
        let parsed: Vec<Mirror> = events.iter().map(Mirror::of).collect();
        let mut inner = self.inner.lock().expect("event hub lock");
        for (e, m) in events.into_iter().zip(parsed) {
            inner.next_id = e.id + 1;
            match m {
                Mirror::Delta(d) => {
                    let entry = inner.mirror.entry(d.run_id).or_default();
                    // Only a mirror that saw the reply from its first delta is whole.
                    if d.seq == entry.1 + 1 {
                        entry.0.push_str(&d.text);
                        entry.1 = d.seq;
                    }
                }
                Mirror::Ended(run_id) => {
                    inner.mirror.remove(&run_id);
                }
                Mirror::None => {}
            }
            deliver(&mut inner, e);
        }
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
        // Saturating: `Last-Event-ID: 9223372036854775807` is a resume after everything.
        let from_store = (after.saturating_add(1) < chan.floor).then_some((after, chan.floor));
        Subscription {
            from_store,
            backlog,
            live,
        }
    }
}

/// Puts an event in its session's recent ring and sends it to the live subscribers.
fn deliver(inner: &mut Inner, logged: LoggedEvent) -> Arc<Published> {
    let id = logged.id;
    let published = Arc::new(Published {
        frame: bytes_frame::render(id, logged.name, &logged.data),
        logged,
    });
    let chan = channel(inner, &published.logged.session_id, id);
    if chan.recent.len() == RECENT {
        if let Some(old) = chan.recent.pop_front() {
            chan.floor = old.logged.id + 1;
        }
    }
    chan.recent.push_back(published.clone());
    chan.active_at = std::time::Instant::now();
    let _ = chan.tx.send(published.clone());
    published
}

/// Drops the channels nobody listens to that have been idle for `idle`; answers how many.
fn evict_idle(inner: &mut Inner, idle: Duration) -> usize {
    let before = inner.channels.len();
    inner
        .channels
        .retain(|_, c| c.tx.receiver_count() > 0 || c.active_at.elapsed() < idle);
    before - inner.channels.len()
}

/// What the follower's mirror of streaming replies takes from an event.
enum Mirror {
    Delta(Delta),
    Ended(String),
    None,
}

impl Mirror {
    fn of(e: &LoggedEvent) -> Mirror {
        match e.name {
            "delta" => serde_json::from_str(&e.data).map_or(Mirror::None, Mirror::Delta),
            "run" => match serde_json::from_str::<Run>(&e.data) {
                Ok(r) if !matches!(r.status, RunStatus::Queued | RunStatus::Running) => {
                    Mirror::Ended(r.id)
                }
                _ => Mirror::None,
            },
            _ => Mirror::None,
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
            active_at: std::time::Instant::now(),
        })
}

/// Every `IDLE`, drops idle channels nobody subscribes to, until the hub is gone.
async fn sweep(inner: std::sync::Weak<Mutex<Inner>>) {
    let mut timer = tokio::time::interval(IDLE);
    timer.tick().await;
    loop {
        timer.tick().await;
        let Some(inner) = inner.upgrade() else { return };
        let dropped = evict_idle(&mut inner.lock().expect("event hub lock"), IDLE);
        if dropped > 0 {
            tracing::debug!(dropped, "idle session channels dropped from memory");
        }
    }
}

enum Write {
    /// A numbered event, and whether it is a run's end.
    Event(Arc<Published>, bool),
    /// Shared mode: an event the log will number (session, name, data, ends a run).
    Pending(String, &'static str, String, bool),
    Flush(tokio::sync::oneshot::Sender<()>),
}

/// The delta rows of ended runs waiting to be pruned: `(session, id of the run's end event,
/// when)`, in order.
struct Prunes {
    grace: Duration,
    due: VecDeque<(String, i64, tokio::time::Instant)>,
}

impl Prunes {
    fn new(grace: Duration) -> Prunes {
        Prunes {
            grace,
            due: VecDeque::new(),
        }
    }

    fn push(&mut self, session_id: String, end_id: i64) {
        let at = tokio::time::Instant::now() + self.grace;
        self.due.push_back((session_id, end_id, at));
    }

    /// Waits for the next queued write, pruning what falls due meanwhile; `None` once the
    /// hub is gone.
    async fn recv(
        &mut self,
        store: &Store,
        rx: &mut mpsc::UnboundedReceiver<Write>,
    ) -> Option<Write> {
        loop {
            self.run_due(store).await;
            let Some(&(_, _, at)) = self.due.front() else {
                return rx.recv().await;
            };
            tokio::select! {
                w = rx.recv() => return w,
                _ = tokio::time::sleep_until(at) => {}
            }
        }
    }

    /// Prunes every entry that is due (best effort: a failure leaves rows for a later end).
    async fn run_due(&mut self, store: &Store) {
        let now = tokio::time::Instant::now();
        let n = self.due.iter().take_while(|(_, _, at)| *at <= now).count();
        if n == 0 {
            return;
        }
        let ends: Vec<(String, i64)> = self.due.drain(..n).map(|(s, id, _)| (s, id)).collect();
        if let Err(e) = store.prune_deltas(&ends).await {
            tracing::warn!(error = %e, "could not prune the delta events of ended runs");
        }
    }
}

/// Of a batch `(session, id, is delta, ends a run)`, the indices to write: deltas of a session
/// whose run's end comes later in the same batch are left out (they would be pruned at once).
fn worth_writing(batch: &[(&str, i64, bool, bool)]) -> Vec<usize> {
    let mut last_end: HashMap<&str, i64> = HashMap::new();
    for &(session, id, _, ends) in batch {
        if ends {
            last_end.insert(session, id);
        }
    }
    (0..batch.len())
        .filter(|&i| {
            let (session, id, delta, _) = batch[i];
            !(delta && last_end.get(session).is_some_and(|end| id < *end))
        })
        .collect()
}

/// Writes published events to the store, one transaction per batch, until the hub is dropped.
async fn write_batches(store: Store, mut rx: mpsc::UnboundedReceiver<Write>) {
    let mut batch: Vec<(Arc<Published>, bool)> = Vec::new();
    let mut waiting = Vec::new();
    let mut prunes = Prunes::new(Duration::ZERO);
    fn take(
        w: Write,
        batch: &mut Vec<(Arc<Published>, bool)>,
        waiting: &mut Vec<tokio::sync::oneshot::Sender<()>>,
    ) {
        match w {
            Write::Event(e, ends) => batch.push((e, ends)),
            Write::Flush(done) => waiting.push(done),
            Write::Pending(..) => unreachable!("local hubs publish numbered events"),
        }
    }
    while let Some(first) = prunes.recv(&store, &mut rx).await {
        take(first, &mut batch, &mut waiting);
        if waiting.is_empty() {
            tokio::time::sleep(FLUSH_EVERY).await;
        }
        while let Ok(w) = rx.try_recv() {
            take(w, &mut batch, &mut waiting);
        }
        if !batch.is_empty() {
            let keys: Vec<(&str, i64, bool, bool)> = batch
                .iter()
                .map(|(p, ends)| {
                    let l = &p.logged;
                    (l.session_id.as_str(), l.id, l.name == "delta", *ends)
                })
                .collect();
            let logged: Vec<&LoggedEvent> = worth_writing(&keys)
                .into_iter()
                .map(|i| &batch[i].0.logged)
                .collect();
            // Never dropped: retried until written (resumes read this log).
            let mut wait = RETRY_FIRST;
            while let Err(e) = store.append_events(&logged).await {
                tracing::error!(error = %e, count = logged.len(), "could not write events to the log; retrying");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(RETRY_CAP);
            }
            for (p, ends) in &batch {
                if *ends {
                    prunes.push(p.logged.session_id.clone(), p.logged.id);
                }
            }
            drop(logged);
            batch.clear();
        }
        for done in waiting.drain(..) {
            let _ = done.send(());
        }
    }
}

/// Shared mode: writes queued events to the database's log as they come, one transaction per
/// batch (whatever queued while the last one was written), until the hub is dropped.
async fn write_shared(store: Store, mut rx: mpsc::UnboundedReceiver<Write>) {
    let mut batch: Vec<(String, &'static str, String)> = Vec::new();
    let mut ends: Vec<bool> = Vec::new();
    let mut waiting = Vec::new();
    let mut prunes = Prunes::new(SHARED_PRUNE_GRACE);
    while let Some(first) = prunes.recv(&store, &mut rx).await {
        let mut next = Some(first);
        while let Some(w) = next {
            match w {
                Write::Pending(session, name, data, end) => {
                    batch.push((session, name, data));
                    ends.push(end);
                }
                Write::Flush(done) => waiting.push(done),
                Write::Event(..) => unreachable!("shared hubs let the log number events"),
            }
            next = rx.try_recv().ok();
        }
        if !batch.is_empty() {
            // Never dropped: retried until written. Meanwhile new events queue behind it and
            // session locks stay held until their events are in (`Engine::lock`), which holds
            // back further decisions: back-pressure instead of loss.
            let mut wait = RETRY_FIRST;
            let ids = loop {
                match store.append_shared_events(&batch).await {
                    Ok(ids) => break ids,
                    Err(e) => {
                        tracing::error!(error = %e, count = batch.len(), "could not write events to the shared log; retrying");
                        tokio::time::sleep(wait).await;
                        wait = (wait * 2).min(RETRY_CAP);
                    }
                }
            };
            for ((e, end), id) in batch.iter().zip(&ends).zip(ids) {
                if *end {
                    prunes.push(e.0.clone(), id);
                }
            }
            batch.clear();
            ends.clear();
        }
        for done in waiting.drain(..) {
            let _ = done.send(());
        }
    }
}

/// Shared mode: follows the database's log from `last`, woken by `LISTEN` (and every 250 ms
/// in case a notification was lost), and delivers what it reads to this instance.
async fn follow(hub: EventHub, mut last: i64) {
    let Some(pool) = hub.store.listen_pool().cloned() else {
        return;
    };
    let mut listener = None;
    loop {
        if listener.is_none() {
            match sqlx::postgres::PgListener::connect_with(&pool).await {
                Ok(mut l) => match l.listen(EVENTS_CHANNEL).await {
                    Ok(()) => listener = Some(l),
                    Err(e) => tracing::warn!(error = %e, "cannot listen for events"),
                },
                Err(e) => tracing::warn!(error = %e, "cannot listen for events"),
            }
        }
        match hub.store.events_after(last, 1000).await {
            Ok(events) => {
                let full = events.len() == 1000;
                if let Some(e) = events.last() {
                    last = e.id;
                }
                hub.apply(events);
                if full {
                    continue;
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot read the shared event log"),
        }
        let wait = Duration::from_millis(250);
        match listener.as_mut() {
            Some(l) => {
                if let Ok(Err(e)) = tokio::time::timeout(wait, l.recv()).await {
                    tracing::warn!(error = %e, "event listener dropped; reconnecting");
                    listener = None;
                }
            }
            None => tokio::time::sleep(wait).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(id: i64, session: &str) -> LoggedEvent {
        LoggedEvent {
            id,
            session_id: session.into(),
            name: "delta",
            data: "{}".into(),
        }
    }

    #[test]
    fn deltas_of_a_run_that_ends_in_the_same_batch_are_not_written() {
        // (session, id, is delta, ends a run)
        let batch = [
            ("a", 1, true, false),
            ("b", 2, true, false),
            ("a", 3, true, false),
            ("a", 4, false, true),
            ("a", 5, true, false), // the next run's first delta
            ("b", 6, false, false),
        ];
        assert_eq!(worth_writing(&batch), vec![1, 3, 4, 5]);
    }

    #[test]
    fn idle_channels_without_subscribers_leave_memory_and_resume_reads_the_store() {
        let mut inner = Inner {
            next_id: 1,
            channels: HashMap::new(),
            mirror: HashMap::new(),
        };
        deliver(&mut inner, event(1, "quiet"));
        deliver(&mut inner, event(2, "watched"));
        let _subscriber = channel(&mut inner, "watched", 3).tx.subscribe();
        inner.next_id = 3;

        // Nothing is idle yet for a minute: everything stays.
        assert_eq!(evict_idle(&mut inner, IDLE), 0);
        // Idle: only the channel nobody listens to goes.
        assert_eq!(evict_idle(&mut inner, Duration::ZERO), 1);
        assert!(inner.channels.contains_key("watched"));
        assert!(!inner.channels.contains_key("quiet"));

        // A resume of "quiet" from before its event finds it below the new channel's floor,
        // so it is read from the store.
        let next = inner.next_id;
        let chan = channel(&mut inner, "quiet", next);
        assert!(chan.recent.is_empty());
        let resume_after = 0;
        assert!(
            resume_after + 1 < chan.floor,
            "event 1 is below the floor: served from the store"
        );
    }
}
