//! Finishing a run: recording its end (tried again while the database is busy), holding or
//! releasing the prompts behind it, and starting the session's next run.
use super::Engine;
use crate::error::Result;
use crate::store::Outcome;
use app::wire::{Event, Run, RunStatus};
use std::time::Duration;

impl Engine {
    /// Records a run's end (unless it already ended), holds the prompts behind a failure,
    /// and starts the next run. A failed write is tried again (a busy database must not
    /// leave a run `running`); should every try fail, the reconcile ends the run later.
    pub(super) async fn finish(&self, run: &Run, outcome: Outcome) {
        let session_id = &run.session_id;
        let mut delay = Duration::from_millis(50);
        for attempt in 1..=FINISH_TRIES {
            match self.record_end(run, &outcome).await {
                Ok(()) => break,
                Err(e) if attempt < FINISH_TRIES => {
                    tracing::warn!(run = %run.id, attempt, error = %e, "could not record the end of a run; trying again");
                    tokio::time::sleep(delay).await;
                    delay = delay.saturating_mul(2).min(Duration::from_secs(2));
                }
                Err(e) => {
                    tracing::error!(run = %run.id, error = %e, "could not record the end of a run; the reconcile will end it");
                }
            }
        }
        if let Some(active) = self.forget_active(&run.id) {
            active.ended.notify_waiters();
        }
        if let Err(e) = self.start_next(session_id).await {
            tracing::error!(session = %session_id, error = %e, "could not start the next run");
        }
    }

    /// Records the end under the session's lock and announces what it changed.
    async fn record_end(&self, run: &Run, outcome: &Outcome) -> Result<()> {
        let session_id = &run.session_id;
        let _guard = match self.lock(session_id).await {
            Ok(g) => Some(g),
            Err(e) => {
                // Recording the end matters more: it is conditional on the run not having ended.
                tracing::error!(run = %run.id, error = %e, "could not take the session lock");
                None
            }
        };
        if let Some((run, reply)) = self.inner.store.finish_run(&run.id, outcome).await? {
            if let Some(mut reply) = reply {
                if run.tools_executed > 0 || run.steps > 1 {
                    if let Err(e) = self.inner.store.with_parts_of(&mut reply).await {
                        tracing::warn!(run = %run.id, error = %e, "could not read a reply's tool calls");
                    }
                }
                self.publish(session_id, Event::Message(reply));
            }
            self.publish(session_id, Event::Run(run.clone()));
            match run.status {
                RunStatus::Failed => {
                    for held in self.inner.store.held_runs(session_id).await? {
                        self.publish(session_id, Event::Run(held));
                    }
                    self.schedule_background(&run).await?;
                }
                // A turn that completes lets the prompts held behind a failure go on.
                RunStatus::Completed => {
                    for released in self.inner.store.release_held(session_id).await? {
                        self.publish(session_id, Event::Run(released));
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// How many times a run's end is written before the reconcile is left to end it.
const FINISH_TRIES: u32 = 5;
