//! Retention of `delta` rows: which events of a batch are written, and the pruning of
//! ended runs' deltas once they fall due.
use super::write::Write;
use crate::store::Store;
use std::collections::VecDeque;
use std::time::Duration;
use tokio::sync::mpsc;

/// Shared log: how long after a run's end its delta rows stay for other instances'
/// followers (which read within a quarter second) before they are pruned.
pub const SHARED_PRUNE_GRACE: Duration = Duration::from_secs(5);

/// The delta rows of ended runs waiting to be pruned: `(session, id of the run's end event,
/// when)`, in order.
pub(super) struct Prunes {
    grace: Duration,
    due: VecDeque<(String, i64, tokio::time::Instant)>,
}

impl Prunes {
    pub(super) fn new(grace: Duration) -> Prunes {
        Prunes {
            grace,
            due: VecDeque::new(),
        }
    }

    pub(super) fn push(&mut self, session_id: String, end_id: i64) {
        let at = tokio::time::Instant::now() + self.grace;
        self.due.push_back((session_id, end_id, at));
    }

    /// Waits for the next queued write, pruning what falls due meanwhile; `None` once the
    /// hub is gone.
    pub(super) async fn recv(
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

/// Of a batch `(id, is delta)`, the indices to write: every event but a delta. Deltas stay
/// in memory; those that leave the window while their run goes on are written apart
/// ([`Write::Spill`]). (No row is needed to keep the log's highest id above the ids sent: the
/// ids are reserved in the log before they go out, see `reserve`.)
pub(super) fn worth_writing(batch: &[(i64, bool)]) -> Vec<usize> {
    (0..batch.len()).filter(|&i| !batch[i].1).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_writes_its_other_events_and_no_delta() {
        // (id, is delta)
        let batch = [(1, true), (2, true), (3, false), (4, true), (5, false)];
        assert_eq!(worth_writing(&batch), vec![2, 4]);
        assert!(worth_writing(&[(7, false), (9, true)]) == vec![0]);
        assert!(worth_writing(&[]).is_empty());
    }
}
