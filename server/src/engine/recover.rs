//! Recovery: on start, runs left `running` by a stop (or, on a shared database, by a dead
//! instance) are recorded interrupted, and free queues start.
use super::Engine;
use crate::error::Result;
use crate::retry::classify;
use crate::store::{EndBy, Outcome};
use app::wire::{Event, RetryClass, Run, RunStatus};

impl Engine {
    /// On start: runs left `running` by a stop become `failed`/`interrupted` with their
    /// partial text kept; prompts queued behind them are held; free queues start. On a
    /// shared database only runs whose instance's lease lapsed are left over (the lease
    /// keeper finds the rest as their leases lapse).
    pub async fn recover(&self) -> Result<()> {
        let store = self.store();
        let left = if store.is_shared() {
            store.orphaned_runs().await?
        } else {
            store.runs_left_running().await?
        };
        // A session that cannot be settled now (its lock held elsewhere, a failed write) is
        // left to the lease keeper and the reconcile, not allowed to stop the start.
        for run in left {
            if let Err(e) = self.take_over(&run, super::LOCK_WAIT).await {
                tracing::warn!(run_id = %run.id, error = %e, "could not end an interrupted run at start");
            }
        }
        for session_id in store.sessions_with_queued_runs().await? {
            let started = async {
                let _guard = self.locks().lock(&session_id).await?;
                self.pump(&session_id).await.map(drop)
            };
            if let Err(e) = started.await {
                tracing::warn!(session_id = %session_id, error = %e, "could not start a queued run at start");
            }
        }
        Ok(())
    }

    /// [`Engine::interrupt`] under the session lock the caller holds, with `why` as the
    /// recorded error message; `by` says whose end it is (a takeover only while the run's
    /// lease is still lapsed).
    pub(super) async fn interrupt_locked(&self, run: &Run, why: &str, by: EndBy) -> Result<()> {
        let store = self.store();
        let partial = match &run.reply_message_id {
            Some(id) => store.message(id).await?.content,
            None => String::new(),
        };
        let outcome = Outcome {
            status: RunStatus::Failed,
            content: partial,
            error_message: Some(why.into()),
            retry: Some(classify::of(RetryClass::Interrupted, None)),
            tokens_used: 0,
            tool_calls_recorded: true, // unknown after a restart
            served: Vec::new(),
            asked: Vec::new(),
            stop_reason: None,
        };
        tracing::warn!(run_id = %run.id, "marking a run interrupted by a server stop");
        if let Some((run, reply)) = store.finish_run(&run.id, &outcome, by).await? {
            if let Some(reply) = reply {
                self.publish(&run.session_id, Event::Message(reply));
            }
            let held = store.held_runs(&run.session_id).await?;
            let session_id = run.session_id.clone();
            self.publish(&session_id, Event::Run(run.clone()));
            for h in held {
                self.publish(&session_id, Event::Run(h));
            }
            self.schedule_background(&run).await?;
        }
        Ok(())
    }
}
