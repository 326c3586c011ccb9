//! Several instances on one database: each keeps a lease (a heartbeat) on the runs it
//! executes, takes over the end of runs whose instance died (recorded `interrupted`), and
//! stops its runs when another instance asks (`LISTEN`, with a polled flag behind it).
//! [`Leases`] holds the lease's own state.
use super::{Engine, LOOP_LOCK_WAIT};
use crate::error::Refusal;
use crate::error::Result;
use crate::store::{EndBy, Store};
use app::wire::RunId;
use app::wire::{Run, RunStatus};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often an instance renews its lease and looks for runs orphaned by a dead one.
pub const HEARTBEAT: Duration = Duration::from_millis(1000);
/// How long an instance may go unseen before its running runs are recorded interrupted.
pub const LEASE: Duration = Duration::from_millis(crate::store::LEASE_MS as u64);

/// This instance's lease on the runs it executes, and the settling of runs no task here
/// executes any more: its id, whether its own heartbeats go through, how often it
/// reconciles.
pub(super) struct Leases {
    store: Store,
    /// This instance's id: the owner recorded on the runs it executes.
    instance: String,
    /// Since when this instance's heartbeats have all gone through (`None` after one
    /// failed): it judges other instances dead only after a whole lease of its own beats.
    beating_since: Mutex<Option<Instant>>,
    /// How often this instance ends the runs it recorded `running` but no longer executes.
    reconcile_every: Duration,
}

impl Leases {
    pub fn new(store: Store, instance: String, reconcile_every: Duration) -> Leases {
        Leases {
            store,
            instance,
            beating_since: Mutex::default(),
            reconcile_every,
        }
    }

    /// This instance's id.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// How often the reconcile loop looks.
    pub fn reconcile_every(&self) -> Duration {
        self.reconcile_every
    }

    /// One heartbeat, and the record of whether heartbeats have been going through.
    async fn beat(&self) -> Result<()> {
        let beat = self.store.heartbeat(&self.instance).await;
        let mut since = self.beating_since.lock().expect("beating_since");
        match &beat {
            Ok(()) => {
                since.get_or_insert_with(Instant::now);
            }
            Err(_) => *since = None,
        }
        Ok(beat?)
    }

    /// Whether this instance's own heartbeats have gone through for a whole lease: after an
    /// outage that stopped every instance's beats, nobody takes the others for dead before
    /// they had a lease's time to beat again.
    fn seen_alive_for_a_lease(&self) -> bool {
        self.beating_since
            .lock()
            .expect("beating_since")
            .is_some_and(|t| t.elapsed() >= LEASE)
    }
}

impl Engine {
    /// Starts the lease keeper and the cancel listener (shared databases only); they end
    /// when the server stops.
    pub async fn keep_leases(&self) -> Result<()> {
        let store = self.store();
        if !store.is_shared() {
            return Ok(());
        }
        self.leases().beat().await?;
        // Heartbeats have their own loop (and connection): however long a scan for orphans
        // takes, or however busy the pool is, this instance's lease is renewed on time.
        self.every(HEARTBEAT, "a heartbeat failed", |e| {
            Box::pin(async move { e.leases().beat().await })
        });
        self.every(HEARTBEAT, "lease keeping failed", |e| {
            Box::pin(async move { e.lease_tick().await })
        });
        let engine = self.clone();
        store.follow_cancels(self.runs().stopping().clone(), HEARTBEAT, move |run| {
            engine.cancel_here(&run)
        });
        Ok(())
    }

    /// One look around: stop runs someone asked to stop (in case a notification was lost),
    /// record runs of dead instances as interrupted.
    async fn lease_tick(&self) -> Result<()> {
        let store = self.store();
        for run_id in store.cancels_requested(self.instance()).await? {
            self.cancel_here(&run_id);
        }
        // A run another instance already ended, or took over (it took this one for dead,
        // and moved this instance's lease epoch on), stops here too: a session never has
        // two replies streaming, and nothing started under a lost lease goes on. Only runs
        // active before the read: one launched while the read waited (for a connection,
        // say) is not in its answer and must not be taken for ended.
        let active_before = self.runs().ids();
        let running: std::collections::HashSet<RunId> = store
            .leased_runs_of(self.instance())
            .await?
            .into_iter()
            .map(|r| r.id)
            .collect();
        for run_id in active_before {
            if !running.contains(&run_id) {
                tracing::warn!(run_id = %run_id, "another instance ended this run: stopping it here");
                self.cancel_here(&run_id);
            }
        }
        if !self.leases().seen_alive_for_a_lease() {
            return Ok(());
        }
        let orphans = store.orphaned_runs().await?;
        for run in orphans {
            tracing::warn!(run_id = %run.id, "the instance executing this run stopped renewing its lease");
            // One session locked for long (or a failed write) holds up only itself: it is
            // looked at again on the next pass.
            if let Err(e) = self.take_over(&run, LOOP_LOCK_WAIT).await {
                tracing::warn!(run_id = %run.id, error = %e, "could not end an orphaned run yet; trying again");
            }
        }
        Ok(())
    }

    /// Ends a run whose instance is gone (`failed`/`interrupted`) and starts what its
    /// session has queued, under the session's lock (waiting `wait` for it at most).
    pub(super) async fn take_over(&self, run: &Run, wait: Duration) -> Result<()> {
        let _guard = self.locks().lock_within(&run.session_id, wait).await?;
        self.interrupt_locked(
            run,
            "the server stopped while this reply was being written",
            EndBy::Takeover,
        )
        .await?;
        self.pump(&run.session_id).await.map(drop)
    }

    /// Stops a run if this instance executes it.
    fn cancel_here(&self, run_id: &RunId) {
        if let Some(active) = self.runs().get(run_id) {
            active.cancel.cancel();
        }
    }

    /// Asks the instance executing a run to stop it and waits (≤ 5 s) for the end to be
    /// recorded. A run whose instance is gone is ended by the lease keeper instead.
    pub(super) async fn cancel_elsewhere(&self, run_id: &RunId) -> Result<Run> {
        let store = self.store();
        store.request_cancel(run_id).await?;
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let run = store.run(run_id).await?;
            match run.status {
                RunStatus::Queued | RunStatus::Running => {}
                // Parked for approval before the request reached its owner: a waiting run
                // holds nothing, so the cancel ends it here.
                RunStatus::AwaitingApproval => {
                    return self.cancel_parked(&run.session_id, run_id).await
                }
                RunStatus::Cancelled => return Ok(run),
                // It ended some other way before the cancel reached it.
                RunStatus::Completed | RunStatus::Failed => {
                    return Err(Refusal::RunEnded {
                        run: run_id.clone(),
                    }
                    .into())
                }
            }
            if Instant::now() >= deadline {
                return Err(Refusal::CancelPending {
                    run: run_id.clone(),
                }
                .into());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
