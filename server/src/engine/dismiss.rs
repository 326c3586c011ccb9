//! Dismiss: the operator's cancel of Tier 2 for a failed run, recorded on the run and
//! announced, so that no tab, reload or other browser arms that failure again.
use super::Engine;
use crate::error::Refusal;
use crate::error::{Error, Result};
use app::wire::RunId;
use app::wire::SessionId;
use app::wire::{Event, Run, RunStatus};

impl Engine {
    /// Marks failed run `run_id` as "automatic retry cancelled" and announces it as a `run`
    /// event. `conflict` when the run is not `failed`; `not_found` when it is not this
    /// session's. Retry now and Regenerate still work on a dismissed run.
    pub async fn dismiss_retry(&self, session_id: &SessionId, run_id: &RunId) -> Result<Run> {
        let engine = self.clone();
        let (session_id, run_id) = (session_id.clone(), run_id.clone());
        self.runs()
            .carry(async move { engine.dismiss(&session_id, &run_id).await })
            .await
    }

    async fn dismiss(&self, session_id: &SessionId, run_id: &RunId) -> Result<Run> {
        self.store().session_exists(session_id).await?;
        let run = self.store().run(run_id).await?;
        if run.session_id != *session_id {
            return Err(Error::not_found("run", run_id));
        }
        let Some(run) = self.store().dismiss_retry(run_id).await? else {
            return Err(Refusal::NotFailed {
                run: run_id.clone(),
                status: run.status,
            }
            .into());
        };
        debug_assert_eq!(run.status, RunStatus::Failed);
        self.publish(session_id, Event::Run(run.clone()));
        Ok(run)
    }
}
