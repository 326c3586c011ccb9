//! The run lifecycle's own state ([`Runs`]): the runs executing on this instance (their
//! handles: how to stop each, what it streamed so far), the tasks a stop waits for, and the
//! stop itself; and the live text laid over stored snapshots of a streaming reply.
use super::Engine;
use crate::error::{Error, Result};
use crate::run::Active;
use app::wire::Message;
use app::wire::RunId;
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Mutex, MutexGuard};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The runs executing here and the tasks the engine waits for when it stops: every run's
/// task and every command carried to its end are spawned through it.
pub(super) struct Runs {
    active: Mutex<HashMap<RunId, Active>>,
    tasks: TaskTracker,
    /// Cancelled when the server stops: run tasks record their run as interrupted.
    stopping: CancellationToken,
}

impl Runs {
    /// `stopping` is the token the runs' own context watches too.
    pub fn new(stopping: CancellationToken) -> Runs {
        Runs {
            active: Mutex::default(),
            tasks: TaskTracker::new(),
            stopping,
        }
    }

    fn table(&self) -> MutexGuard<'_, HashMap<RunId, Active>> {
        self.active
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The run `run_id` if this instance executes it.
    pub fn get(&self, run_id: &RunId) -> Option<Active> {
        self.table().get(run_id).cloned()
    }

    /// The ids of the runs executing here.
    pub fn ids(&self) -> Vec<RunId> {
        self.table().keys().cloned().collect()
    }

    /// Records that this instance executes run `run_id`.
    pub fn insert(&self, run_id: RunId, active: Active) {
        self.table().insert(run_id, active);
    }

    /// Takes a run out of this instance's active set (its task has ended).
    pub fn remove(&self, run_id: &RunId) -> Option<Active> {
        self.table().remove(run_id)
    }

    /// Spawns a task the stop waits for (a run's, or a command's).
    pub fn spawn<F>(&self, task: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.tasks.spawn(task)
    }

    /// Runs a command to its end on a task of its own, and answers what it answers. A caller
    /// that stops waiting (a client hanging up drops its request's future, and with it this
    /// one) cannot cut the command between its commit and what must follow it: launching
    /// the run it started, publishing its events, starting the runs it released. The stop
    /// waits for it like for a run.
    pub async fn carry<T: Send + 'static>(
        &self,
        command: impl Future<Output = Result<T>> + Send + 'static,
    ) -> Result<T> {
        match self.spawn(command).await {
            Ok(answer) => answer,
            Err(e) => {
                tracing::error!(error = %e, "a command failed inside Mulligan");
                Err(Error::internal(
                    "the command failed inside Mulligan; see the server's log",
                ))
            }
        }
    }

    /// Cancelled once the server is stopping.
    pub fn stopping(&self) -> &CancellationToken {
        &self.stopping
    }

    /// Whether the server is stopping (nothing starts then).
    pub fn is_stopping(&self) -> bool {
        self.stopping.is_cancelled()
    }

    /// Stops every run here and waits until their tasks (and the carried commands) are done.
    pub async fn stop(&self) {
        self.stopping.cancel();
        self.tasks.close();
        self.tasks.wait().await;
    }
}

impl Engine {
    /// The streamed text of a run executing here, for snapshots of a streaming reply.
    pub fn live_text(&self, run_id: &RunId) -> Option<(String, u64)> {
        let active = self.runs().get(run_id)?;
        let live = active.live();
        Some((live.text.clone(), live.seq))
    }

    /// A message snapshot with a streaming reply's live text laid over the stored one: this
    /// instance's own runs first, else what the shared log delivered here when that is
    /// further on than the stored text (whose `delta_seq` says how far it is).
    pub fn overlay_live(&self, mut m: Message) -> Message {
        if m.status == Some(app::wire::MessageStatus::Streaming) {
            let stored = m.delta_seq.unwrap_or(0);
            let live = m.run_id.as_ref().and_then(|r| {
                self.live_text(r)
                    .or_else(|| self.hub().mirrored_text(r).filter(|(_, seq)| *seq > stored))
            });
            if let Some((text, seq)) = live {
                m.content = text;
                m.delta_seq = Some(seq);
            }
        }
        m
    }
}
