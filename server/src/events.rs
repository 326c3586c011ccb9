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
//! [`SHARED_PRUNE_GRACE`] on a shared log, so every follower has read them). One instance
//! writes a delta row only when the delta leaves the session's in-memory window ([`RECENT`]
//! events) while its run is still going, or when it is the newest event of a batch (so the
//! log's highest id stays the highest id ever sent, and a restart never gives an id twice):
//! a resume within the window is served from memory, and a resume below it finds every
//! delta of a running run in the log. The stored reply and the `message` event published
//! with the run's end carry the whole text, so a resume from the log over a pruned range
//! gets that snapshot instead of the deltas.
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

/// One published event: its SSE frame, rendered once (the JSON data is a slice of it, not
/// a second copy), and the fields the log needs.
#[derive(Debug)]
pub struct Published {
    pub id: i64,
    pub name: &'static str,
    /// Shared with the session's channel (no copy per event).
    session_id: Arc<str>,
    pub frame: bytes_frame::Frame,
    /// Where the `data:` JSON is in `frame`.
    data: std::ops::Range<usize>,
    /// A delta already written to the log (set and read by the writer task only).
    stored: std::sync::atomic::AtomicBool,
}

impl Published {
    /// The row the log stores for this event.
    fn logged(&self) -> LoggedEvent {
        LoggedEvent {
            id: self.id,
            session_id: self.session_id.to_string(),
            name: self.name,
            data: String::from_utf8_lossy(&self.frame[self.data.clone()]).into_owned(),
        }
    }
}

pub mod bytes_frame {
    //! An SSE frame (`id:`, `event:`, `data:` lines), rendered once and shared by subscribers.
    pub type Frame = axum::body::Bytes;

    pub fn render(id: i64, name: &str, data: &str) -> Frame {
        render_with(id, name, data.len(), |buf| {
            buf.extend_from_slice(data.as_bytes())
        })
        .0
    }

    /// Renders a frame in one buffer, `write` putting the (one-line JSON) data in; answers
    /// where the data is in the frame.
    pub fn render_with(
        id: i64,
        name: &str,
        size_hint: usize,
        write: impl FnOnce(&mut Vec<u8>),
    ) -> (Frame, std::ops::Range<usize>) {
        use std::io::Write;
        let mut buf = Vec::with_capacity(size_hint + name.len() + 40);
        let _ = write!(buf, "id: {id}\nevent: {name}\ndata: ");
        let start = buf.len();
        write(&mut buf);
        let end = buf.len();
        buf.extend_from_slice(b"\n\n");
        (Frame::from(buf), start..end)
    }
}

/// An event's data JSON, written into `buf` (the same JSON as [`Event::data_json`]).
fn write_data(buf: &mut Vec<u8>, event: &Event) {
    let r = match event {
        Event::Message(m) => serde_json::to_writer(&mut *buf, m),
        Event::Delta(d) => serde_json::to_writer(&mut *buf, d),
        Event::Run(r) => serde_json::to_writer(&mut *buf, r),
        Event::Attempt(a) => serde_json::to_writer(&mut *buf, a),
        Event::Session(s) => serde_json::to_writer(&mut *buf, s),
        Event::ToolCall(t) => serde_json::to_writer(&mut *buf, t),
    };
    r.expect("wire types always serialize");
}

struct Channel {
    session_id: Arc<str>,
    tx: broadcast::Sender<Arc<Published>>,
    recent: VecDeque<Arc<Published>>,
    /// Events of this session with ids below this are not in `recent`: read them from the store.
    floor: i64,
    /// When the last event was delivered (or the channel made).
    active_at: std::time::Instant,
    /// The id of this session's latest run end: deltas before it are never written.
    ended_at: i64,
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
        let ends_run = matches!(event, Event::Run(r) if !r.status.is_active());
        if self.mode == Mode::Shared {
            let data = event.data_json();
            let _ = self
                .writer
                .send(Write::Pending(session_id.to_string(), name, data, ends_run));
            return;
        }
        let hint = match event {
            Event::Delta(d) => d.text.len() + d.run_id.len() + d.message_id.len() + 64,
            _ => 512,
        };
        let mut inner = self.inner.lock().expect("event hub lock");
        let id = inner.next_id;
        inner.next_id += 1;
        let frame = bytes_frame::render_with(id, name, hint, |buf| write_data(buf, event));
        let published = deliver(
            &mut inner,
            (id, session_id, name),
            frame,
            ends_run,
            Some(&self.writer),
        );
        // Sent under the lock, so the writer gets events in id order.
        let _ = self.writer.send(Write::Event(published, ends_run));
        drop(inner);
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
            let frame = bytes_frame::render_with(e.id, e.name, e.data.len(), |buf| {
                buf.extend_from_slice(e.data.as_bytes())
            });
            deliver(
                &mut inner,
                (e.id, e.session_id.as_str(), e.name),
                frame,
                false,
                None,
            );
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
            .filter(|e| e.id > after)
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

/// Puts an event in its session's recent ring and sends it to the live subscribers. With
/// `spill` (one instance), a delta of a running run that leaves the ring goes to the log.
fn deliver(
    inner: &mut Inner,
    (id, session_id, name): (i64, &str, &'static str),
    (frame, data): (bytes_frame::Frame, std::ops::Range<usize>),
    ends_run: bool,
    spill: Option<&mpsc::UnboundedSender<Write>>,
) -> Arc<Published> {
    let chan = channel(inner, session_id, id);
    let published = Arc::new(Published {
        id,
        name,
        session_id: chan.session_id.clone(),
        frame,
        data,
        stored: Default::default(),
    });
    if chan.recent.len() == RECENT {
        if let Some(old) = chan.recent.pop_front() {
            chan.floor = old.id + 1;
            if let Some(writer) = spill {
                if old.name == "delta" && old.id > chan.ended_at {
                    let _ = writer.send(Write::Spill(old));
                }
            }
        }
    }
    if ends_run {
        chan.ended_at = id;
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
    // Looked up first: no key allocated for a session that has its channel (every delta).
    if !inner.channels.contains_key(session_id) {
        inner.channels.insert(
            session_id.to_string(),
            Channel {
                session_id: Arc::from(session_id),
                tx: broadcast::channel(1024).0,
                recent: VecDeque::new(),
                floor,
                active_at: std::time::Instant::now(),
                ended_at: 0,
            },
        );
    }
    inner
        .channels
        .get_mut(session_id)
        .expect("the channel was just made")
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
    /// A delta of a running run that left its session's in-memory window: write it.
    Spill(Arc<Published>),
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

/// Of a batch `(id, is delta)`, the indices to write: every event but a delta, and the event
/// with the highest id even if it is a delta (the log's highest id must stay the highest id
/// ever sent: a restart numbers on from it). Deltas stay in memory; those that leave the
/// window while their run goes on are written apart ([`Write::Spill`]).
fn worth_writing(batch: &[(i64, bool)]) -> Vec<usize> {
    let newest = (0..batch.len()).max_by_key(|&i| batch[i].0);
    (0..batch.len())
        .filter(|&i| !batch[i].1 || Some(i) == newest)
        .collect()
}

/// Writes published events to the store, one transaction per batch, until the hub is dropped.
async fn write_batches(store: Store, mut rx: mpsc::UnboundedReceiver<Write>) {
    let mut batch: Vec<(Arc<Published>, bool)> = Vec::new();
    let mut spilled: Vec<Arc<Published>> = Vec::new();
    let mut waiting = Vec::new();
    let mut prunes = Prunes::new(Duration::ZERO);
    fn take(
        w: Write,
        batch: &mut Vec<(Arc<Published>, bool)>,
        spilled: &mut Vec<Arc<Published>>,
        waiting: &mut Vec<tokio::sync::oneshot::Sender<()>>,
    ) {
        match w {
            Write::Event(e, ends) => batch.push((e, ends)),
            Write::Spill(e) => spilled.push(e),
            Write::Flush(done) => waiting.push(done),
            Write::Pending(..) => unreachable!("local hubs publish numbered events"),
        }
    }
    use std::sync::atomic::Ordering::Relaxed;
    while let Some(first) = prunes.recv(&store, &mut rx).await {
        take(first, &mut batch, &mut spilled, &mut waiting);
        if waiting.is_empty() {
            tokio::time::sleep(FLUSH_EVERY).await;
        }
        while let Ok(w) = rx.try_recv() {
            take(w, &mut batch, &mut spilled, &mut waiting);
        }
        if !batch.is_empty() || !spilled.is_empty() {
            let keys: Vec<(i64, bool)> = batch
                .iter()
                .map(|(p, _)| (p.id, p.name == "delta"))
                .collect();
            let mut chosen: Vec<&Published> = worth_writing(&keys)
                .into_iter()
                .map(|i| &*batch[i].0)
                .collect();
            // A spilled delta may be a batch's newest, written already; or in this batch.
            chosen.extend(spilled.iter().map(|p| &**p));
            chosen.sort_by_key(|p| p.id);
            chosen.dedup_by_key(|p| p.id);
            chosen.retain(|p| !p.stored.load(Relaxed));
            let rows: Vec<LoggedEvent> = chosen.iter().map(|p| p.logged()).collect();
            let logged: Vec<&LoggedEvent> = rows.iter().collect();
            // Never dropped: retried until written (resumes read this log).
            let mut wait = RETRY_FIRST;
            while let Err(e) = store.append_events(&logged).await {
                tracing::error!(error = %e, count = logged.len(), "could not write events to the log; retrying");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(RETRY_CAP);
            }
            for p in &chosen {
                p.stored.store(true, Relaxed);
            }
            for (p, ends) in &batch {
                if *ends {
                    prunes.push(p.session_id.to_string(), p.id);
                }
            }
            drop(logged);
            drop(rows);
            drop(chosen);
            batch.clear();
            spilled.clear();
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
                Write::Event(..) | Write::Spill(_) => {
                    unreachable!("shared hubs let the log number events")
                }
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

    /// Delivers a `delta` event `id` of `session`.
    fn put(
        inner: &mut Inner,
        id: i64,
        session: &str,
        ends_run: bool,
        spill: Option<&mpsc::UnboundedSender<Write>>,
    ) -> Arc<Published> {
        let frame = bytes_frame::render_with(id, "delta", 2, |b| b.extend_from_slice(b"{}"));
        deliver(inner, (id, session, "delta"), frame, ends_run, spill)
    }

    #[test]
    fn a_batch_writes_its_other_events_and_only_its_newest_delta() {
        // (id, is delta)
        let batch = [(1, true), (2, true), (3, false), (4, true), (5, false)];
        assert_eq!(worth_writing(&batch), vec![2, 4], "no delta row");
        // The newest event is a delta: written, so a restart numbers on after it.
        let batch = [(7, false), (9, true), (8, true)];
        assert_eq!(worth_writing(&batch), vec![0, 1]);
        assert!(worth_writing(&[]).is_empty());
    }

    #[test]
    fn a_delta_leaving_the_window_goes_to_the_log_unless_its_run_ended() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut inner = Inner {
            next_id: 1,
            channels: HashMap::new(),
            mirror: HashMap::new(),
        };
        for id in 1..=RECENT as i64 {
            put(&mut inner, id, "s", false, Some(&tx));
        }
        assert!(rx.try_recv().is_err(), "nothing left the window yet");
        // One more: delta 1 leaves the window while its run goes on.
        put(&mut inner, RECENT as i64 + 1, "s", true, Some(&tx));
        match rx.try_recv() {
            Ok(Write::Spill(p)) => assert_eq!(p.id, 1),
            _ => panic!("the delta that left the window was not spilled"),
        }
        // The run ended (at the last event): its deltas leaving the window stay out.
        put(&mut inner, RECENT as i64 + 2, "s", false, Some(&tx));
        assert!(
            rx.try_recv().is_err(),
            "a delta of an ended run was spilled"
        );
        assert_eq!(inner.channels["s"].floor, 3);
    }

    #[test]
    fn a_frame_carries_the_data_once_and_the_log_reads_it_back() {
        let mut inner = Inner {
            next_id: 1,
            channels: HashMap::new(),
            mirror: HashMap::new(),
        };
        let delta = Event::Delta(Delta {
            run_id: "r".into(),
            message_id: "m".into(),
            seq: 3,
            text: "a\"b\n".into(),
            step: 1,
        });
        let frame = bytes_frame::render_with(7, "delta", 8, |b| write_data(b, &delta));
        let p = deliver(&mut inner, (7, "s", "delta"), frame, false, None);
        let want = delta.data_json();
        assert_eq!(
            &p.frame[..],
            format!("id: 7\nevent: delta\ndata: {want}\n\n").as_bytes()
        );
        let row = p.logged();
        assert_eq!(
            (row.id, row.session_id.as_str(), row.name),
            (7, "s", "delta")
        );
        assert_eq!(row.data, want);
    }

    #[test]
    fn idle_channels_without_subscribers_leave_memory_and_resume_reads_the_store() {
        let mut inner = Inner {
            next_id: 1,
            channels: HashMap::new(),
            mirror: HashMap::new(),
        };
        put(&mut inner, 1, "quiet", false, None);
        put(&mut inner, 2, "watched", false, None);
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
