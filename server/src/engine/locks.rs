//! Per-session locks within this process: an entry lives only while someone holds or waits
//! for it, so sessions that are done with leave nothing behind.
use app::wire::SessionId;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::OwnedMutexGuard;

type Entries = HashMap<String, Arc<tokio::sync::Mutex<()>>>;

#[derive(Clone, Default)]
pub(super) struct Locks(Arc<Mutex<Entries>>);

/// A held session lock; released (and its entry dropped when nobody waits) on drop.
pub(super) struct Held {
    guard: Option<OwnedMutexGuard<()>>,
    locks: Locks,
    session_id: String,
}

impl Locks {
    /// Waits for the session's lock (first come, first served).
    pub async fn lock(&self, session_id: &SessionId) -> Held {
        let mutex = self
            .0
            .lock()
            .expect("locks")
            .entry(session_id.to_string())
            .or_default()
            .clone();
        Held {
            guard: Some(mutex.lock_owned().await),
            locks: self.clone(),
            session_id: session_id.to_string(),
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.0.lock().expect("locks").len()
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        drop(self.guard.take());
        let mut entries = self.locks.0.lock().expect("locks");
        // Every holder and waiter owns a clone, taken under this map's lock: one left is the
        // map's own, so nobody needs the entry.
        if entries
            .get(&self.session_id)
            .is_some_and(|m| Arc::strong_count(m) == 1)
        {
            entries.remove(&self.session_id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn one_holder_at_a_time_and_nothing_left_once_all_are_done() {
        let locks = Locks::default();
        let first = locks.lock(&SessionId::new("s")).await;
        let waiter = tokio::spawn({
            let locks = locks.clone();
            async move {
                let _held = locks.lock(&SessionId::new("s")).await;
            }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished(), "the second lock waits for the first");
        let other = locks.lock(&SessionId::new("t")).await; // another session is not held up
        assert_eq!(locks.len(), 2);

        drop(first);
        waiter.await.unwrap();
        assert_eq!(
            locks.len(),
            1,
            "s is gone once its holder and its waiter are done"
        );
        drop(other);
        assert_eq!(locks.len(), 0);
    }
}
