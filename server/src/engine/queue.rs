//! The per-session queue: starting a session's next queued run (one active run per
//! session) and releasing the prompts held behind a failed turn.
use super::{Engine, LOOP_LOCK_WAIT};
use crate::error::Result;
use crate::run::{Active, RunTask};
use crate::store::Started;
use app::wire::SessionId;
use app::wire::{Event, RunId};
use std::sync::Arc;
use std::time::Duration;

/// How often every instance looks for queued runs that nothing starts.
pub const PUMP_EVERY: Duration = Duration::from_secs(3);

impl Engine {
    /// Lets the prompts held behind a failed turn go on (in order; answers their ids). They
    /// are newer turns: the failed turn's waiting background retry ends.
    pub async fn release(&self, session_id: &SessionId) -> Result<Vec<RunId>> {
        let (engine, session_id) = (self.clone(), session_id.clone());
        self.runs()
            .carry(async move { engine.release_held(&session_id).await })
            .await
    }

    async fn release_held(&self, session_id: &SessionId) -> Result<Vec<RunId>> {
        self.store().session_exists(session_id).await?;
        let _guard = self.locks().lock(session_id).await?;
        let released = self.store().release_held(session_id).await?;
        let ids = released.iter().map(|r| r.id.clone()).collect();
        let any = !released.is_empty();
        for run in released {
            self.publish(session_id, Event::Run(run));
        }
        self.pump(session_id).await?;
        if any && self.store().clear_waiting_retry(session_id).await? {
            tracing::info!(session_id = %session_id, "released prompts ended the waiting background retry");
            crate::metrics::metrics().background_retry("superseded");
            self.publish_session(session_id).await?;
        }
        Ok(ids)
    }

    /// Starts the pump loop: every `PUMP_EVERY`, the queued (not held) runs of sessions with
    /// nothing running start, whatever left them there (a dispatch cut short, a start that
    /// failed); it ends when the server stops. A session locked elsewhere is left for the
    /// next pass.
    pub fn pump_periodically(&self) {
        self.every(PUMP_EVERY, "starting queued runs failed", |e| {
            Box::pin(async move { e.pump_waiting().await.map(drop) })
        });
    }

    /// One pass of the pump loop: answers how many runs it started.
    pub(super) async fn pump_waiting(&self) -> Result<usize> {
        let mut started = 0;
        for session_id in self.store().sessions_waiting_to_start().await? {
            let _guard = match self.locks().lock_within(&session_id, LOOP_LOCK_WAIT).await {
                Ok(guard) => guard,
                Err(e) => {
                    tracing::debug!(session_id = %session_id, error = %e, "the pump skips a locked session");
                    continue;
                }
            };
            match self.pump(&session_id).await {
                Ok(Some(run)) => {
                    tracing::warn!(session_id = %session_id, run_id = %run, "a queued run was waiting with nothing running; started it");
                    started += 1;
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(session_id = %session_id, error = %e, "the pump could not start a queued run; trying again");
                }
            }
        }
        Ok(started)
    }

    /// Starts the session's next queued run unless one is running. Call under the lock.
    /// Answers the started run's id.
    /// (Boxed with an explicit `Send`: a run's task → finish → pump is a cycle of futures.)
    pub(super) fn pump<'a>(
        &'a self,
        session_id: &'a SessionId,
    ) -> futures::future::BoxFuture<'a, Result<Option<RunId>>> {
        Box::pin(async move {
            let Some(owner) = self.owner() else {
                return Ok(None);
            };
            let started = self.store().start_next(session_id, owner).await?;
            Ok(started.map(|s| self.launch(s)))
        })
    }

    /// This instance's id as the owner of the runs it starts; `None` once the server is
    /// stopping (nothing starts then).
    pub(super) fn owner(&self) -> Option<&str> {
        (!self.runs().is_stopping()).then_some(self.leases().instance())
    }

    /// Announces a run the store just started and executes it as a task (with the context
    /// every run shares, and this engine's commands for its built-in tools); answers its id.
    pub(super) fn launch(&self, started: Started) -> RunId {
        let session_id = &started.run.session_id;
        self.publish(session_id, Event::Run(started.run.clone()));
        self.publish(session_id, Event::Message(started.reply.clone()));
        let id = started.run.id.clone();
        // Every log line of the run (its attempts, tools, saves and end) says whose it is; a
        // root span, so the next run (started as this one ends) is not nested in it.
        let span = tracing::info_span!(parent: None, "run", session_id = %session_id, run_id = %id);
        let active = Active::default();
        self.runs().insert(id.clone(), active.clone());
        let task = RunTask::new(
            self.context().clone(),
            Arc::new(self.clone()),
            started,
            active,
        );
        let engine = self.clone();
        self.runs()
            .spawn(tracing::Instrument::instrument(engine.execute(task), span));
        id
    }

    /// Starts the session's next run under its lock.
    pub(super) async fn start_next(&self, session_id: &SessionId) -> Result<()> {
        let _guard = self.locks().lock(session_id).await?;
        self.pump(session_id).await.map(|_| ())
    }
}
