//! One instance: event ids are reserved in the log a block ahead of being handed out, so no
//! id reaches a subscriber before the log holds a mark above it, and a restart (crash or not)
//! never gives an id twice. Publishing writes nothing: a reservation is one small write per
//! [`BLOCK`] ids, made in the background when half the block is left; events numbered past the
//! mark (ids handed out faster than the database reserves them) wait, in order, for it.
use super::channels::{deliver, Inner};
use super::write::Write;
use crate::store::Store;
use std::sync::{Mutex, Weak};
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// Ids reserved at a time. A restart skips what was reserved but not handed out (ids only
/// have to increase).
pub(super) const BLOCK: i64 = 1 << 16;
const RETRY_FIRST: Duration = Duration::from_millis(50);
const RETRY_CAP: Duration = Duration::from_secs(2);

/// Whether a new reservation is due: less than half a block left below the mark.
pub(super) fn due(next_id: i64, mark: i64) -> bool {
    mark.saturating_sub(next_id) < BLOCK / 2
}

/// The mark of a block reserved from `next_id` on: ids below it may be handed out.
pub(super) fn mark_from(next_id: i64) -> i64 {
    next_id.saturating_add(BLOCK)
}

/// Delivers the held events below the mark, in order, and queues them for the log.
pub(super) fn release(inner: &mut Inner, writer: Option<&mpsc::UnboundedSender<Write>>) {
    while inner.held.front().is_some_and(|h| h.id < inner.reserved) {
        let Some(h) = inner.held.pop_front() else {
            break;
        };
        let published = deliver(
            inner,
            (h.id, &h.session_id, h.name),
            h.frame,
            h.ends_run,
            writer,
        );
        if let Some(w) = writer {
            let _ = w.send(Write::Event(published, h.ends_run));
        }
    }
}

/// Reserves a block whenever asked, retrying a failed write until it is in, then delivers the
/// events that waited for it and announces the new mark; ends with the hub.
pub(super) async fn keep_reserving(
    inner: Weak<Mutex<Inner>>,
    writer: mpsc::WeakUnboundedSender<Write>,
    store: Store,
    mut asked: mpsc::Receiver<()>,
    marks: watch::Sender<i64>,
) {
    let mut again = false;
    loop {
        if !again && asked.recv().await.is_none() {
            return;
        }
        let Some(hub) = inner.upgrade() else { return };
        let mark = mark_from(hub.lock().expect("event hub lock").next_id);
        drop(hub);
        let mut wait = RETRY_FIRST;
        while let Err(e) = store.reserve_event_ids(mark).await {
            tracing::error!(error = %e, "could not reserve event ids; events wait until it is done");
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(RETRY_CAP);
        }
        let Some(hub) = inner.upgrade() else { return };
        let writer = writer.upgrade();
        {
            let mut inner = hub.lock().expect("event hub lock");
            inner.reserved = inner.reserved.max(mark);
            release(&mut inner, writer.as_ref());
            again = due(inner.next_id, inner.reserved);
            inner.reserving = again;
        }
        marks.send_replace(mark);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_is_asked_for_when_half_of_it_is_left() {
        let mark = mark_from(1);
        assert_eq!(mark, 1 + BLOCK);
        assert!(!due(1, mark));
        assert!(!due(mark - BLOCK / 2, mark));
        assert!(due(mark - BLOCK / 2 + 1, mark));
        assert!(due(mark + 5, mark), "past the mark");
        assert_eq!(mark_from(i64::MAX - 1), i64::MAX);
    }
}
