//! The in-memory side of the hub: each session's broadcast channel and window of recent
//! events, and the sweep that drops idle channels.
use super::bytes_frame;
use super::published::Published;
use super::recent::{Recent, RunOf};
use super::write::Write;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{broadcast, mpsc};
/// How many recent events per session a resume can be served from memory.
pub(super) const RECENT: usize = 4096;
/// How many events a session's live ring holds for its subscribers. Small: a subscriber that
/// falls further behind catches up from `recent` (see the SSE handler), so the ring only
/// has to cover one scheduling delay. Each session pays for its slots for as long as its
/// channel lives, and the ring keeps its last `RING` frames alive; older deltas in `recent`
/// are kept by their fields alone.
pub const RING: usize = 32;
/// A session's channel with no subscriber, no event for this long and no run streaming is
/// dropped from memory (a later resume reads the store instead).
pub(super) const IDLE: Duration = Duration::from_secs(60);

/// An event numbered past the reservation, not yet delivered or queued for the log.
pub(super) struct Held {
    pub(super) id: i64,
    pub(super) session_id: app::wire::SessionId,
    pub(super) name: &'static str,
    pub(super) frame: (super::bytes_frame::Frame, std::ops::Range<usize>),
    pub(super) ends_run: bool,
}

pub(super) struct Channel {
    pub(super) session_id: Arc<str>,
    pub(super) tx: broadcast::Sender<Arc<Published>>,
    pub(super) recent: VecDeque<Recent>,
    /// The run of the latest kept delta (its kept deltas share its ids).
    pub(super) last_run: Option<Arc<RunOf>>,
    /// Events of this session with ids below this are not in `recent`: read them from the store.
    pub(super) floor: i64,
    /// When the last event was delivered (or the channel made).
    pub(super) active_at: std::time::Instant,
    /// The id of this session's latest run end: deltas before it are never written.
    pub(super) ended_at: i64,
    /// A run's deltas came and its end has not: the window holds deltas no log may have
    /// (one instance logs a delta only as it leaves the window), so the channel stays.
    pub(super) streaming: bool,
}

pub(super) struct Inner {
    /// Local: the next id to give. Shared: one past the last id the follower applied.
    pub(super) next_id: i64,
    /// Local: ids below this are reserved in the log and may go out (Shared: `i64::MAX`).
    pub(super) reserved: i64,
    /// Local: a reservation was asked for and is not in yet.
    pub(super) reserving: bool,
    /// Local: events numbered past `reserved`, waiting for it in order.
    pub(super) held: VecDeque<Held>,
    pub(super) channels: HashMap<String, Channel>,
    /// Shared: the text streamed so far of each streaming reply seen in the log, by run id.
    pub(super) mirror: HashMap<app::wire::RunId, (String, u64)>,
    /// Shared: streaming replies whose deltas came with a gap (the listening connection
    /// dropped, or this instance began following mid-reply), by run id: their later deltas
    /// are held until the owner's saved text covers the gap (`follower::catch_up`).
    pub(super) behind: HashMap<app::wire::RunId, Behind>,
}

/// A streaming reply's deltas held behind a gap: its session, and each held delta with the
/// event id it came under.
pub(super) struct Behind {
    pub(super) session_id: app::wire::SessionId,
    pub(super) held: Vec<(i64, app::wire::Delta)>,
}

impl Inner {
    pub(super) fn new(next_id: i64, reserved: i64) -> Inner {
        Inner {
            next_id,
            reserved,
            reserving: false,
            held: VecDeque::new(),
            channels: HashMap::new(),
            mirror: HashMap::new(),
            behind: HashMap::new(),
        }
    }

    /// The first id not yet delivered here: the floor of a channel made now.
    pub(super) fn undelivered(&self) -> i64 {
        self.held.front().map_or(self.next_id, |h| h.id)
    }
}

/// Puts an event in its session's recent ring and sends it to the live subscribers. With
/// `spill` (one instance), a delta of a running run that leaves the ring goes to the log.
pub(super) fn deliver(
    inner: &mut Inner,
    (id, session_id, name): (i64, &app::wire::SessionId, &'static str),
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
            chan.floor = old.id() + 1;
            if let Some(writer) = spill {
                if old.is_delta() && old.id() > chan.ended_at {
                    let _ = writer.send(Write::Spill(old.published(&chan.session_id)));
                }
            }
        }
    }
    if ends_run {
        chan.ended_at = id;
        chan.streaming = false;
    } else if name == "delta" {
        chan.streaming = true;
    }
    chan.recent.push_back(Recent::Shared(published.clone()));
    // The event that just left the ring's reach: a delta is kept by its fields from now on.
    if let Some(i) = chan.recent.len().checked_sub(RING + 1) {
        if let Some(e) = chan.recent.get_mut(i) {
            e.compact(&mut chan.last_run);
        }
    }
    chan.active_at = std::time::Instant::now();
    let _ = chan.tx.send(published.clone());
    published
}

/// Drops the channels nobody listens to that have been idle for `idle` and whose run is not
/// streaming (a long tool call is quiet, and its run's deltas must stay for a later resume);
/// answers how many.
pub(super) fn evict_idle(inner: &mut Inner, idle: Duration) -> usize {
    let before = inner.channels.len();
    inner
        .channels
        .retain(|_, c| c.tx.receiver_count() > 0 || c.streaming || c.active_at.elapsed() < idle);
    before - inner.channels.len()
}

pub(super) fn channel<'a>(
    inner: &'a mut Inner,
    session_id: &app::wire::SessionId,
    floor: i64,
) -> &'a mut Channel {
    let session_id = session_id.as_str();
    // Looked up first: no key allocated for a session that has its channel (every delta).
    if !inner.channels.contains_key(session_id) {
        inner.channels.insert(
            session_id.to_string(),
            Channel {
                session_id: Arc::from(session_id),
                tx: broadcast::channel(RING).0,
                recent: VecDeque::new(),
                last_run: None,
                floor,
                active_at: std::time::Instant::now(),
                ended_at: 0,
                streaming: false,
            },
        );
    }
    inner
        .channels
        .get_mut(session_id)
        .expect("the channel was just made")
}

/// Every `idle` ([`IDLE`] but in tests), drops idle channels nobody subscribes to, until the
/// hub is gone.
pub(super) async fn sweep(inner: std::sync::Weak<Mutex<Inner>>, idle: Duration) {
    let mut timer = tokio::time::interval(idle);
    timer.tick().await;
    loop {
        timer.tick().await;
        let Some(inner) = inner.upgrade() else { return };
        let dropped = evict_idle(&mut inner.lock().expect("event hub lock"), idle);
        if dropped > 0 {
            tracing::debug!(dropped, "idle session channels dropped from memory");
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
        deliver(
            inner,
            (id, &app::wire::SessionId::new(session), "delta"),
            frame,
            ends_run,
            spill,
        )
    }

    #[test]
    fn a_delta_leaving_the_window_goes_to_the_log_unless_its_run_ended() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut inner = Inner::new(1, i64::MAX);
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
    fn a_channel_whose_run_streams_stays_however_long_it_is_quiet() {
        let mut inner = Inner::new(1, i64::MAX);
        put(&mut inner, 1, "tool call", false, None);
        assert_eq!(evict_idle(&mut inner, Duration::ZERO), 0, "its run streams");
        // The run's end: nothing in the window is needed any more.
        put(&mut inner, 2, "tool call", true, None);
        assert_eq!(evict_idle(&mut inner, Duration::ZERO), 1);
    }

    #[test]
    fn idle_channels_without_subscribers_leave_memory_and_resume_reads_the_store() {
        let mut inner = Inner::new(1, i64::MAX);
        put(&mut inner, 1, "quiet", true, None); // (its run ended)
        put(&mut inner, 2, "watched", false, None);
        let _subscriber = channel(&mut inner, &app::wire::SessionId::new("watched"), 3)
            .tx
            .subscribe();
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
        let chan = channel(&mut inner, &app::wire::SessionId::new("quiet"), next);
        assert!(chan.recent.is_empty());
        let resume_after = 0;
        assert!(
            resume_after + 1 < chan.floor,
            "event 1 is below the floor: served from the store"
        );
    }
}
