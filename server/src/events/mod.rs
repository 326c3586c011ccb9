//! The event log: every event gets the next id, goes out to the session's SSE subscribers as
//! one shared, pre-rendered frame, and is written to the store in batches.
//!
//! One instance (SQLite): ids come from this process and events go out at once. Several
//! instances (PostgreSQL, [`Mode::Shared`]): the database numbers events (one sequence, in
//! commit order); each instance sends its events in batches as `NOTIFY` payloads and writes
//! only run-level events to the log, no deltas; every instance's follower feeds its
//! subscribers from the notifications (the log behind them), and mirrors streaming replies'
//! text so a snapshot taken anywhere agrees with the stream.
//!
//! Retention: `delta` events are not kept in the log for ever. Once a run's end is written,
//! the session's delta rows before it are pruned (at once on one instance; after
//! [`SHARED_PRUNE_GRACE`] on a shared log, so every follower has read them). One instance
//! writes a delta row only when the delta leaves the session's in-memory window
//! (`RECENT` events) while its run is still going: a resume within the
//! window is served from memory, and a resume below it finds every delta of a running run in
//! the log. The stored reply and the `message` event published with the run's end carry the
//! whole text, so a resume from the log over a pruned range gets that snapshot instead of the
//! deltas.
//!
//! Ids are never given twice, crash or not. One instance reserves them in the log a block
//! ahead of handing them out (`reserve`); a restart numbers on after the reservation. On a
//! shared log the database's sequence gives them, and only committed ones go out.
pub mod bytes_frame;
mod channels;
mod follower;
mod published;
mod recent;
mod reserve;
mod retention;
mod write;
mod writer;

pub use channels::RING;
pub use published::Published;
pub use recent::Recent;
pub use retention::SHARED_PRUNE_GRACE;

use crate::store::Store;
use app::wire::Event;
use app::wire::RunId;
use app::wire::SessionId;
use channels::{channel, deliver, sweep, Inner};
use follower::follow;
use published::write_data;
use std::sync::{Arc, Mutex};
use tokio::sync::{broadcast, mpsc, watch};
use write::Write;
use writer::{write_batches, write_shared};

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
    /// Local: asks for the next block of ids, and the reservation's mark as it moves.
    reservations: Option<(mpsc::Sender<()>, watch::Receiver<i64>)>,
}

/// What a subscriber gets: the store range to read first, the events in memory, then the live feed.
pub struct Subscription {
    /// Read `store.events_between(session, after, before)` first when set.
    pub from_store: Option<(i64, i64)>,
    pub backlog: Vec<Recent>,
    pub live: broadcast::Receiver<Arc<Published>>,
}

impl EventHub {
    /// Starts the hub and its batch writer (and, on a shared database, its follower); ids
    /// continue after the store's last event (one instance: after the ids it reserved, of
    /// which it reserves a first block before it answers).
    pub async fn start(
        store: Store,
    ) -> crate::error::Result<(EventHub, tokio::task::JoinHandle<()>)> {
        EventHub::start_with(store, channels::IDLE).await
    }

    /// [`EventHub::start`] with channels dropped from memory after `idle` (tests shorten it).
    async fn start_with(
        store: Store,
        idle: std::time::Duration,
    ) -> crate::error::Result<(EventHub, tokio::task::JoinHandle<()>)> {
        let next_id = store.max_event_id().await? + 1;
        let mode = if store.is_shared() {
            Mode::Shared
        } else {
            Mode::Local
        };
        let reserved = match mode {
            Mode::Local => {
                let mark = reserve::mark_from(next_id);
                store.reserve_event_ids(mark).await?;
                mark
            }
            // The database's sequence numbers events, only as they go in.
            Mode::Shared => i64::MAX,
        };
        let (writer, rx) = mpsc::unbounded_channel();
        let (ask, asked) = mpsc::channel(1);
        let (marks, marked) = watch::channel(reserved);
        let hub = EventHub {
            inner: Arc::new(Mutex::new(Inner::new(next_id, reserved))),
            writer,
            store: store.clone(),
            mode,
            closing: Default::default(),
            reservations: (mode == Mode::Local).then_some((ask, marked)),
        };
        tokio::spawn(sweep(Arc::downgrade(&hub.inner), idle));
        let task = match mode {
            Mode::Local => {
                tokio::spawn(reserve::keep_reserving(
                    Arc::downgrade(&hub.inner),
                    hub.writer.downgrade(),
                    store.clone(),
                    asked,
                    marks,
                ));
                tokio::spawn(write_batches(store, rx))
            }
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
        // Events numbered past the reservation go to the writer once it is in.
        if let Some((_, marks)) = &self.reservations {
            let last = self.last_id();
            let _ = marks.clone().wait_for(|mark| *mark > last).await;
        }
        let (done, wait) = tokio::sync::oneshot::channel();
        if self.writer.send(Write::Flush(done)).is_ok() {
            let _ = wait.await;
        }
    }

    /// The id of the last event delivered to this instance's subscribers so far.
    pub fn last_id(&self) -> i64 {
        self.inner.lock().expect("event hub lock").next_id - 1
    }

    /// The highest event id a client may hold: this instance's last delivered one, or on a
    /// shared log the log's last (another instance's stream may be ahead of this one's).
    /// A `Last-Event-ID` past it was never given out (another database's, or made up).
    pub async fn head(&self) -> crate::error::Result<i64> {
        let delivered = self.last_id();
        Ok(match self.mode {
            Mode::Local => delivered,
            Mode::Shared => delivered.max(self.store().max_event_id().await?),
        })
    }

    /// A streaming reply's text and delta count as the shared log has delivered them here.
    pub fn mirrored_text(&self, run_id: &RunId) -> Option<(String, u64)> {
        self.inner
            .lock()
            .expect("event hub lock")
            .mirror
            .get(run_id)
            .cloned()
    }

    /// Publishes one event of a session. Local: numbered, delivered and queued for the log
    /// at once. Shared: queued for the log; the follower delivers it once it is there.
    pub fn publish(&self, session_id: &SessionId, event: &Event) {
        let name = event.name();
        // Only a run that started has deltas, and a session runs one at a time: the end of a
        // queued run (cancelled before it started) says nothing about the deltas of the run
        // that is streaming meanwhile.
        let ends_run =
            matches!(event, Event::Run(r) if !r.status.is_active() && r.started_at.is_some());
        if self.mode == Mode::Shared {
            let data = event.data_json();
            let _ = self
                .writer
                .send(Write::Pending(session_id.to_string(), name, data, ends_run));
            return;
        }
        let hint = match event {
            Event::Delta(d) => {
                d.text.len() + d.run_id.as_str().len() + d.message_id.as_str().len() + 64
            }
            _ => 512,
        };
        let mut inner = self.inner.lock().expect("event hub lock");
        let id = inner.next_id;
        inner.next_id += 1;
        let frame = bytes_frame::render_with(id, name, hint, |buf| write_data(buf, event));
        if !inner.reserving && reserve::due(inner.next_id, inner.reserved) {
            if let Some((ask, _)) = &self.reservations {
                inner.reserving = ask.try_send(()).is_ok();
            }
        }
        if id >= inner.reserved {
            // Not reserved yet: it goes out, in order, once it is (`reserve::release`).
            inner.held.push_back(channels::Held {
                id,
                session_id: session_id.clone(),
                name,
                frame,
                ends_run,
            });
            return;
        }
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

    /// Subscribes to a session's events after `after` (`None`: only new ones).
    pub fn subscribe(&self, session_id: &SessionId, after: Option<i64>) -> Subscription {
        let mut inner = self.inner.lock().expect("event hub lock");
        let next = inner.undelivered();
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
            .filter(|e| e.id() > after)
            .map(Recent::copy)
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

/// A hub on a new SQLite store of its own, for the crate's unit tests.
#[cfg(test)]
pub(crate) async fn test_hub() -> EventHub {
    test_hub_idle(channels::IDLE).await
}

/// [`test_hub`] whose channels leave memory after `idle`.
#[cfg(test)]
pub(crate) async fn test_hub_idle(idle: std::time::Duration) -> EventHub {
    let dir = std::env::temp_dir().join(format!("mulligan-hub-{}", crate::clock::new_id("t")));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let store = Store::open(&format!("sqlite://{}", dir.join("m.db").display()))
        .await
        .expect("a store");
    EventHub::start_with(store, idle).await.expect("a hub").0
}

#[cfg(test)]
mod tests {
    use super::*;
    use app::wire::{Delta, Run, RunStatus};

    fn run(id: &str, status: RunStatus, started: bool) -> Event {
        let mut r: Run = serde_json::from_value(serde_json::json!({
            "id": id, "session_id": "s", "anchor_message_id": "m", "status": "queued",
            "kind": "prompt", "attempt": 1, "tier1_attempts": 0, "created_at": 0
        }))
        .unwrap();
        r.status = status;
        r.started_at = started.then_some(1);
        Event::Run(r)
    }

    fn delta(seq: u64) -> Event {
        Event::Delta(Delta {
            run_id: RunId::new("r_a"),
            message_id: app::wire::MessageId::new("m_a"),
            seq,
            text: format!("t{seq}"),
            step: 1,
        })
    }

    /// The names of the session's events in the log after `after`.
    async fn logged(hub: &EventHub, after: i64) -> Vec<&'static str> {
        // Twice: the first writes the batch (and queues its prunes), the second lets the
        // writer prune what fell due before it answers.
        hub.flush().await;
        hub.flush().await;
        let logged = hub
            .store()
            .events_between(&SessionId::new("s"), after, i64::MAX, 1000)
            .await
            .unwrap();
        logged.iter().map(|e| e.name).collect()
    }

    /// Writing an event the log already has changes nothing and fails nothing (the writer
    /// retries a batch until it is in, so a write must be safe to repeat).
    #[tokio::test]
    async fn an_event_written_twice_is_logged_once() {
        let hub = test_hub().await;
        hub.publish(&SessionId::new("s"), &run("r_a", RunStatus::Running, true));
        hub.flush().await;
        let logged = hub
            .store()
            .events_between(&SessionId::new("s"), 0, i64::MAX, 1000)
            .await
            .unwrap();
        let rows: Vec<_> = logged.iter().collect();
        hub.store().append_events(&rows).await.unwrap();
        let again = hub
            .store()
            .events_between(&SessionId::new("s"), 0, i64::MAX, 1000)
            .await
            .unwrap();
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].data, logged[0].data);
    }

    /// A hub that stops without a word (a crash: nothing flushed) and one started again on
    /// its store: the new one numbers on after every id the first gave, written or not.
    #[tokio::test]
    async fn ids_given_before_a_crash_are_never_given_again() {
        let hub = test_hub().await;
        hub.publish(&SessionId::new("s"), &run("r_a", RunStatus::Running, true));
        hub.flush().await;
        for seq in 1..=5 {
            hub.publish(&SessionId::new("s"), &delta(seq));
        }
        let given = hub.last_id();
        let (again, _writer) = EventHub::start(hub.store().clone()).await.unwrap();
        again.publish(&SessionId::new("s"), &run("r_a", RunStatus::Failed, true));
        assert!(
            again.last_id() > given,
            "{} was given again",
            again.last_id()
        );
    }

    /// Ids handed out faster than they are reserved wait for the reservation, then go out in
    /// order; none goes out past the log's mark.
    #[tokio::test]
    async fn events_past_the_reservation_wait_for_it() {
        let hub = test_hub().await;
        let before = hub.last_id();
        let mark = hub.inner.lock().unwrap().reserved;
        let mut sub = hub.subscribe(&SessionId::new("s"), None);
        // The reserver cannot run meanwhile (this test's one thread never yields).
        let n = (mark - 1 - before) as u64 + 10;
        for seq in 1..=n {
            hub.publish(&SessionId::new("s"), &delta(seq));
        }
        {
            let inner = hub.inner.lock().unwrap();
            assert_eq!(inner.held.len(), 10, "ids past the mark went out");
            let recent = &inner.channels["s"].recent;
            assert_eq!(recent.back().unwrap().id(), mark - 1);
        }
        hub.flush().await;
        let last = hub.last_id();
        assert!(hub.store().max_event_id().await.unwrap() > last);
        let inner = hub.inner.lock().unwrap();
        assert!(inner.held.is_empty());
        let recent = &inner.channels["s"].recent;
        assert_eq!(recent.back().unwrap().id(), last);
        let ids: Vec<i64> = recent.iter().map(|e| e.id()).collect();
        assert!(ids.windows(2).all(|w| w[1] == w[0] + 1), "in order, once");
        drop(inner);
        // The live feed saw them too, the newest last.
        let mut newest = 0;
        loop {
            match sub.live.try_recv() {
                Ok(p) => newest = p.id,
                Err(broadcast::error::TryRecvError::Lagged(_)) => continue,
                Err(_) => break,
            }
        }
        assert_eq!(newest, last);
    }

    /// A run quiet for longer than the idle limit (a long tool call) with nobody listening
    /// keeps its deltas in memory: a later resume gets every one of them.
    #[tokio::test]
    async fn a_quiet_running_runs_deltas_stay_for_a_later_resume() {
        let hub = test_hub_idle(std::time::Duration::from_millis(20)).await;
        let before = hub.last_id();
        hub.publish(&SessionId::new("s"), &run("r_a", RunStatus::Running, true));
        for seq in 1..=3 {
            hub.publish(&SessionId::new("s"), &delta(seq));
        }
        // A session whose run ended: its channel goes, which says the sweep ran.
        hub.publish(
            &SessionId::new("ended"),
            &run("r_b", RunStatus::Completed, true),
        );
        hub.flush().await;
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        while hub.inner.lock().unwrap().channels.contains_key("ended") {
            assert!(tokio::time::Instant::now() < deadline, "no sweep ran");
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let sub = hub.subscribe(&SessionId::new("s"), Some(before));
        let mut names: Vec<&str> = Vec::new();
        if let Some((after, below)) = sub.from_store {
            let logged = hub
                .store()
                .events_between(&SessionId::new("s"), after, below, 100)
                .await
                .unwrap();
            names.extend(logged.iter().map(|e| e.name));
        }
        names.extend(
            sub.backlog
                .iter()
                .map(|e| if e.is_delta() { "delta" } else { "run" }),
        );
        assert_eq!(names, ["run", "delta", "delta", "delta"], "deltas lost");
    }

    /// A batch too big for one statement goes in as one transaction of several, and a
    /// repeat of it (a retry) changes nothing.
    #[tokio::test]
    async fn a_batch_of_several_statements_is_written_whole_and_once() {
        let hub = test_hub().await;
        let first = hub.last_id() + 1;
        let rows: Vec<crate::store::LoggedEvent> = (0..450)
            .map(|i| crate::store::LoggedEvent {
                id: first + i,
                session_id: SessionId::new("s"),
                name: "delta",
                data: format!("{{\"n\":{i}}}"),
            })
            .collect();
        let batch: Vec<_> = rows.iter().collect();
        for _ in 0..2 {
            hub.store().append_events(&batch).await.unwrap();
            let logged = hub
                .store()
                .events_between(&SessionId::new("s"), 0, i64::MAX, 1000)
                .await
                .unwrap();
            let ids: Vec<i64> = logged.iter().map(|e| e.id).collect();
            assert_eq!(ids, (first..first + 450).collect::<Vec<_>>());
        }
    }

    /// The end of a queued run (cancelled before it started) is no run end for the log: the
    /// deltas of the run streaming meanwhile stay until that run's own end prunes them.
    #[tokio::test]
    async fn a_queued_runs_end_never_prunes_the_streaming_runs_deltas() {
        let hub = test_hub().await;
        let before = hub.last_id();
        hub.publish(&SessionId::new("s"), &run("r_a", RunStatus::Running, true));
        hub.publish(&SessionId::new("s"), &delta(1));
        // A delta's row is written when it leaves the window (here, by hand).
        hub.flush().await;
        let rows = hub
            .store()
            .events_between(&SessionId::new("s"), before, i64::MAX, 1000)
            .await
            .unwrap();
        let spilled = crate::store::LoggedEvent {
            id: before + 2,
            session_id: SessionId::new("s"),
            name: "delta",
            data: "{}".into(),
        };
        assert_eq!(rows.len(), 1, "only the run's row");
        hub.store().append_events(&[&spilled]).await.unwrap();
        assert_eq!(logged(&hub, before).await, ["run", "delta"]);
        hub.publish(
            &SessionId::new("s"),
            &run("r_b", RunStatus::Cancelled, false),
        );
        assert_eq!(
            logged(&hub, before).await,
            ["run", "delta", "run"],
            "a queued run's end pruned the streaming run's delta"
        );
        hub.publish(
            &SessionId::new("s"),
            &run("r_a", RunStatus::Completed, true),
        );
        assert_eq!(logged(&hub, before).await, ["run", "run", "run"]);
    }
}
