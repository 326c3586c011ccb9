//! The session locks ([`SessionLocks`]): held for every decision about a session's runs —
//! per session within this process (an entry lives only while someone holds or waits for
//! it, so sessions that are done with leave nothing behind), and on a shared database also
//! a lock row across instances.
use crate::error::{Error, Result};
use crate::events::EventHub;
use crate::store::{SessionLock, Store};
use app::wire::SessionId;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::OwnedMutexGuard;

/// The longest a request waits for a session's lock before it answers `session.busy`.
pub const LOCK_WAIT: Duration = Duration::from_secs(10);
/// The longest a background loop waits for one session's lock in one pass.
pub const LOOP_LOCK_WAIT: Duration = Duration::from_millis(500);

/// The session locks of this engine: the in-process ones, and the store's shared ones.
pub(super) struct SessionLocks {
    local: Locks,
    store: Store,
    hub: EventHub,
}

/// A held session lock (see [`SessionLocks::lock`]).
pub(super) struct SessionGuard {
    _local: Held,
    shared: Option<(SessionLock, EventHub)>,
}

impl SessionLocks {
    pub fn new(store: Store, hub: EventHub) -> SessionLocks {
        SessionLocks {
            local: Locks::default(),
            store,
            hub,
        }
    }

    /// The session's lock: held for every decision about its runs. On a shared database it
    /// is also held across instances, and released only once the events published under it
    /// are in the shared log (so no instance acts on a state its events have not reached).
    /// A wait past [`LOCK_WAIT`] gives up with `session.busy`.
    pub async fn lock(&self, session_id: &SessionId) -> Result<SessionGuard> {
        self.lock_within(session_id, LOCK_WAIT).await
    }

    /// [`SessionLocks::lock`] waiting at most `wait`: background loops use a short bound
    /// ([`LOOP_LOCK_WAIT`]) and leave a locked session for their next pass, so one session
    /// held up never holds up the rest. Dropping the future while it waits leaves nothing
    /// held.
    pub async fn lock_within(
        &self,
        session_id: &SessionId,
        wait: Duration,
    ) -> Result<SessionGuard> {
        let deadline = tokio::time::Instant::now() + wait;
        let local = tokio::time::timeout_at(deadline, self.local.lock(session_id))
            .await
            .map_err(|_| Error::busy(session_id))?;
        let shared = self.store.lock_session(session_id, deadline).await?;
        Ok(SessionGuard {
            _local: local,
            shared: shared.map(|s| (s, self.hub.clone())),
        })
    }
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        if let Some((lock, hub)) = self.shared.take() {
            tokio::spawn(async move {
                hub.flush().await;
                drop(lock);
            });
        }
    }
}

type Entries = HashMap<String, Arc<tokio::sync::Mutex<()>>>;

/// The per-session locks within this process.
#[derive(Clone, Default)]
struct Locks(Arc<Mutex<Entries>>);

/// A held in-process session lock; released (and its entry dropped when nobody waits) on
/// drop.
struct Held {
    guard: Option<OwnedMutexGuard<()>>,
    locks: Locks,
    session_id: String,
}

impl Locks {
    /// Waits for the session's lock (first come, first served).
    async fn lock(&self, session_id: &SessionId) -> Held {
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
