//! The periodic reconcile (every instance, SQLite and PostgreSQL): a run this instance
//! recorded `running` but no longer executes — its task ended without recording the end —
//! is ended `failed`/`interrupted`, and its session's queue moves on.
use super::{Engine, LOOP_LOCK_WAIT};
use crate::error::Result;
use crate::store::EndBy;
use app::wire::RunStatus;

impl Engine {
    /// Starts the reconcile loop; it ends when the server stops.
    pub fn reconcile_periodically(&self) {
        let period = self.leases().reconcile_every();
        self.every(period, "reconciling runs failed", |e| {
            Box::pin(async move { e.reconcile().await.map(|_| ()) })
        });
    }

    /// One pass: ends every run recorded `running` by this instance that has no live task
    /// here. Answers how many it ended.
    pub(super) async fn reconcile(&self) -> Result<usize> {
        let mut ended = 0;
        for run in self.store().running_runs_of(self.instance()).await? {
            if self.runs().get(&run.id).is_some() {
                continue;
            }
            // Under the session lock: a run is made active (`pump`) and stops being active
            // (`finish`) under it, so what is seen here is settled.
            let _guard = match self
                .locks()
                .lock_within(&run.session_id, LOOP_LOCK_WAIT)
                .await
            {
                Ok(guard) => guard,
                // Held elsewhere for long: looked at again on the next pass.
                Err(e) => {
                    tracing::warn!(run_id = %run.id, error = %e, "reconcile skips a locked session");
                    continue;
                }
            };
            if self.runs().get(&run.id).is_some() {
                continue;
            }
            let run = self.store().run(&run.id).await?;
            if run.status != RunStatus::Running {
                continue;
            }
            tracing::warn!(run_id = %run.id, "a run recorded running here has no task: ending it");
            self.interrupt_locked(
                &run,
                "the server lost track of this reply while it was being written",
                EndBy::Settled,
            )
            .await?;
            self.pump(&run.session_id).await?;
            ended += 1;
        }
        Ok(ended)
    }
}
