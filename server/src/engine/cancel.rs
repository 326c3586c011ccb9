//! Cancel and stop: ending a queued or running run `cancelled`, and stopping whatever a
//! session is doing (its running run, else its next queued one, and its waiting retry).
use super::Engine;
use crate::error::Refusal;
use crate::error::{Error, Kind, Result};
use crate::store::{EndBy, Outcome};
use app::wire::RunId;
use app::wire::SessionId;
use app::wire::{Event, Run, RunStatus};
use std::time::Duration;

impl Engine {
    /// Stops a queued or running run; it ends `cancelled`, whatever the provider says after.
    /// A run stopped before it started is counted here (the run's task counts the ones it ran).
    pub async fn cancel(&self, session_id: &SessionId, run_id: &RunId) -> Result<Run> {
        let engine = self.clone();
        let (session_id, run_id) = (session_id.clone(), run_id.clone());
        self.runs()
            .carry(async move {
                let run = engine.cancel_run(&session_id, &run_id).await?;
                crate::metrics::metrics().cancelled_before_start(&run);
                Ok(run)
            })
            .await
    }

    async fn cancel_run(&self, session_id: &SessionId, run_id: &RunId) -> Result<Run> {
        let run = self.store().run(run_id).await?;
        if run.session_id != *session_id {
            return Err(Error::not_found("run", run_id));
        }
        let guard = self.locks().lock(session_id).await?;
        let run = self.store().run(run_id).await?;
        match run.status {
            RunStatus::Queued => {
                let outcome = Outcome {
                    status: RunStatus::Cancelled,
                    content: String::new(),
                    error_message: None,
                    retry: None,
                    tokens_used: 0,
                    tool_calls_recorded: false, // a queued run never called a tool
                    served: Vec::new(),
                    asked: Vec::new(),
                    stop_reason: None,
                };
                let (run, _) = self
                    .store()
                    .finish_run(run_id, &outcome, EndBy::Settled)
                    .await?
                    .ok_or_else(|| ended(run_id))?;
                self.publish(session_id, Event::Run(run.clone()));
                Ok(run)
            }
            RunStatus::AwaitingApproval => {
                let run = self.cancel_waiting_run(&run).await?;
                drop(guard);
                Ok(run)
            }
            RunStatus::Running => {
                let active = self.runs().get(run_id);
                let Some(active) = active else {
                    // Executed by another instance: ask it, and wait for it to record the end.
                    drop(guard);
                    return self.cancel_elsewhere(run_id).await;
                };
                let stopped = active.ended.notified();
                active.cancel.cancel();
                drop(guard);
                // The run's task records `cancelled` and notifies; it never takes long.
                let _ = tokio::time::timeout(Duration::from_secs(5), stopped).await;
                let run = self.store().run(run_id).await?;
                match run.status {
                    // It ended some other way before the cancel reached it.
                    RunStatus::Completed | RunStatus::Failed => Err(ended(run_id)),
                    // It parked for approval as the cancel reached it: the cancel still wins.
                    RunStatus::AwaitingApproval => self.cancel_parked(session_id, run_id).await,
                    _ => Ok(run),
                }
            }
            _ => Err(ended(run_id)),
        }
    }

    /// Stops what a session is doing: its running run, else its next queued one (prompts
    /// held behind a failure are not "doing" anything), and its waiting background retry
    /// (then, with nothing running, it answers the failed run that retry was for).
    /// `conflict` when there is none of these.
    pub async fn stop(&self, session_id: &SessionId) -> Result<Run> {
        self.store().session_exists(session_id).await?;
        let waited = match self.cancel_waiting_retry(session_id).await {
            Ok(_) => true,
            Err(e) if e.kind == Kind::Refused(Refusal::NoWaitingRetry) => false,
            Err(e) => return Err(e),
        };
        let runs = self.store().runs(session_id).await?;
        let target = runs
            .iter()
            .find(|r| matches!(r.status, RunStatus::Running | RunStatus::AwaitingApproval))
            .or_else(|| {
                runs.iter()
                    .find(|r| r.status == RunStatus::Queued && r.held_by.is_none())
            });
        match target {
            Some(run) => self.cancel(session_id, &run.id).await,
            None if waited => self
                .store()
                .last_turn(session_id)
                .await?
                .ok_or_else(|| Error::internal("a waiting retry without a turn")),
            None => Err(Refusal::NothingToStop.into()),
        }
    }
}

impl Engine {
    /// Ends `cancelled` a run that parked for approval while a cancel was on its way to it
    /// (here or on the instance that ran it): a cancel answered 200 ends the run.
    pub(super) async fn cancel_parked(
        &self,
        session_id: &SessionId,
        run_id: &RunId,
    ) -> Result<Run> {
        let _guard = self.locks().lock(session_id).await?;
        let run = self.store().run(run_id).await?;
        match run.status {
            RunStatus::AwaitingApproval => self.cancel_waiting_run(&run).await,
            RunStatus::Cancelled => Ok(run),
            RunStatus::Queued | RunStatus::Running => Err(Refusal::CancelPending {
                run: run_id.clone(),
            }
            .into()),
            RunStatus::Completed | RunStatus::Failed => Err(ended(run_id)),
        }
    }
}

fn ended(run_id: &RunId) -> Error {
    Refusal::RunEnded {
        run: run_id.clone(),
    }
    .into()
}
