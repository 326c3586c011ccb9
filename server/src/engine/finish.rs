//! Finishing a run: recording its end (tried again while the database is busy), holding or
//! releasing the prompts behind it, and starting the session's next run.
use super::Engine;
use crate::error::Refusal;
use crate::error::Result;
use crate::run::{Active, RunTask};
use crate::store::{EndBy, Finished, Outcome};
use app::wire::RunId;
use app::wire::{Event, Run, RunStatus};
use std::time::Duration;

impl Engine {
    /// Executes a run's task and records its end. The run leaves this instance's active set
    /// (waking a waiting cancel) however the task ends, even if recording its end panics.
    pub(super) async fn execute(self, task: RunTask) {
        let _leaves = Leaves {
            run_id: task.run().id.clone(),
            active: task.active().clone(),
            engine: self.clone(),
        };
        let (run, outcome) = task.execute().await;
        self.finish(&run, outcome).await;
    }

    /// Records a run's end (unless it already ended), holds the prompts behind a failure,
    /// and starts the next run, in the same transaction. A failed write is tried again until
    /// it is in (backing off to 2 s): a database outage, a failover or a lapse of this
    /// instance's lease that no one acted on delays the end, never loses it; a takeover ends
    /// the tries. Meanwhile the run stays this instance's active run, its lease renewed, so
    /// no reconcile or other instance ends it in its place. Only once the server is stopping
    /// does it give up, after [`FINISH_TRIES_STOPPING`] more tries (the next start records
    /// the run interrupted, its saved text kept).
    pub(super) async fn finish(&self, run: &Run, outcome: Outcome) {
        let session_id = &run.session_id;
        let mut delay = Duration::from_millis(50);
        let mut next_tried = false;
        let mut tries_left_stopping = FINISH_TRIES_STOPPING;
        let mut attempt = 0u32;
        loop {
            attempt = attempt.saturating_add(1);
            match self.record_end(run, &outcome).await {
                Ok(tried) => {
                    next_tried = tried;
                    break;
                }
                Err(e) => {
                    if self.runs().is_stopping() {
                        tries_left_stopping = tries_left_stopping.saturating_sub(1);
                        if tries_left_stopping == 0 {
                            tracing::error!(run_id = %run.id, error = %e, "could not record the end of a run before stopping; the next start ends it");
                            break;
                        }
                    }
                    tracing::warn!(run_id = %run.id, attempt, error = %e, "could not record the end of a run; trying again");
                    tokio::time::sleep(delay).await;
                    delay = delay.saturating_mul(2).min(Duration::from_secs(2));
                }
            }
        }
        if let Some(active) = self.runs().remove(&run.id) {
            active.ended.notify_waiters();
        }
        if next_tried {
            return;
        }
        if let Err(e) = self.start_next(session_id).await {
            tracing::error!(session_id = %session_id, error = %e, "could not start the next run");
        }
    }

    /// Records the end under the session's lock, announces what it changed and launches the
    /// next run the same transaction started. Answers whether that transaction looked for
    /// a next run (else the caller starts it).
    async fn record_end(&self, run: &Run, outcome: &Outcome) -> Result<bool> {
        if outcome.status == RunStatus::AwaitingApproval {
            return self.record_park(run, outcome).await;
        }
        let session_id = &run.session_id;
        let guard = match self.locks().lock(session_id).await {
            Ok(g) => Some(g),
            Err(e) => {
                // Recording the end matters more: it is conditional on the run not having ended.
                tracing::error!(run_id = %run.id, error = %e, "could not take the session lock");
                None
            }
        };
        // Without the lock nothing may start here: the caller starts the next run under it.
        let start = guard
            .as_ref()
            .and(self.owner())
            .map(|owner| (session_id, owner));
        let ended = self
            .store()
            .end_run(&run.id, outcome, EndBy::Owner, start)
            .await?;
        let Some(Finished {
            run,
            reply,
            released,
            started,
        }) = ended
        else {
            // Refused: the run ended elsewhere, or its lease is lapsed for now. A lapse no
            // one acted on is like an outage: the end waits for the next heartbeat.
            if self.store().is_shared()
                && self.store().still_owned(&run.id, self.instance()).await?
            {
                crate::metrics::metrics().fenced_write();
                return Err(Refusal::LeaseLapsed {
                    run: run.id.clone(),
                }
                .into());
            }
            return Ok(false);
        };
        if let Some(mut reply) = reply {
            if run.tools_executed > 0 || run.steps > 1 {
                if let Err(e) = self.store().with_parts_of(&mut reply).await {
                    tracing::warn!(run_id = %run.id, error = %e, "could not read a reply's tool calls");
                }
            }
            self.publish(session_id, Event::Message(reply));
        }
        self.publish(session_id, Event::Run(run.clone()));
        // A turn that completes lets the prompts held behind a failure go on.
        for released in released {
            self.publish(session_id, Event::Run(released));
        }
        // Before anything below can fail: the run is `running` in the store already.
        if let Some(started) = started {
            self.launch(started);
        }
        if run.status == RunStatus::Failed {
            for held in self.store().held_runs(session_id).await? {
                self.publish(session_id, Event::Run(held));
            }
            self.schedule_background(&run).await?;
        }
        if run.status == RunStatus::Completed && run.provenance.is_some() {
            self.parked_turn_completed(&run).await?;
        }
        Ok(start.is_some())
    }
}

/// How many more times a run's end is tried once the server is stopping.
const FINISH_TRIES_STOPPING: u32 = 5;

/// Takes a run out of this instance's active set when its task ends, however it ends.
struct Leaves {
    engine: Engine,
    run_id: RunId,
    active: Active,
}

impl Drop for Leaves {
    fn drop(&mut self) {
        let _ = self.engine.runs().remove(&self.run_id);
        self.active.ended.notify_waiters();
    }
}
