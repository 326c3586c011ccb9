//! Background retries: in a session whose `auto_retry` is `background`, a retryable failure
//! leaves a waiting retry on the session row (`retry::background` says when), and a loop on
//! every instance fires the due ones through retry-now's path, claimed under the session's
//! lock. The database is the schedule, so a closed tab, a restart or a dead instance loses
//! nothing, and a retry fires once however many instances see it due. [`Retries`]
//! holds their own state (the policies, the loop's wake).
use super::{Engine, LOOP_LOCK_WAIT};
use crate::clock::now_ms;
use crate::error::Refusal;
use crate::error::{Kind, Result};
use crate::metrics::metrics;
use crate::retry::background;
use crate::retry::parking::Parking;
use app::wire::SessionId;
use app::wire::{AutoRetry, Backoff, Event, ProvenanceKind, Run, RunStatus, Session};
use std::time::Duration;
use tokio::sync::futures::Notified;
use tokio::sync::Notify;

/// The shortest wait between two looks for due waiting retries.
const TICK: Duration = Duration::from_millis(250);
/// The longest: how late a retry another instance left (and can no longer fire) may fire here.
const IDLE: Duration = Duration::from_secs(5);

/// Background retries' and parking's own state: their policies, and the wake of the loop
/// that fires them.
pub(super) struct Retries {
    /// Background retries' countdown (Tier 2's policy, served to the browser too).
    policy: Backoff,
    /// Parking behind a model that is out: its probes' backoff and release rate.
    parking: Parking,
    /// Wakes the background-retry loop when this instance leaves a waiting retry.
    wake: Notify,
}

impl Retries {
    pub fn new(policy: Backoff, parking: Parking) -> Retries {
        Retries {
            policy,
            parking,
            wake: Notify::new(),
        }
    }

    /// The countdown of a background retry.
    pub fn policy(&self) -> Backoff {
        self.policy
    }

    /// How turns park behind a model that is out.
    pub fn parking(&self) -> Parking {
        self.parking
    }

    /// Wakes the loop: a waiting retry may be due sooner than it sleeps.
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// Resolves when the loop is woken.
    fn woken(&self) -> Notified<'_> {
        self.wake.notified()
    }
}

impl Engine {
    /// After `run` failed (call under the session's lock): leaves a waiting retry when the
    /// session retries in the background and the failure is retryable.
    pub(super) async fn schedule_background(&self, run: &Run) -> Result<()> {
        let store = self.store();
        let rec = store.session(&run.session_id).await?;
        if rec.session.auto_retry != AutoRetry::Background {
            return Ok(());
        }
        // A background retry that failed again counts on; anything else starts at 1.
        let fired_by_background = run
            .provenance
            .as_ref()
            .is_some_and(|p| p.kind == ProvenanceKind::AutoResume && p.manual == Some(false));
        let attempt = if fired_by_background {
            rec.retry_attempt + 1
        } else {
            1
        };
        let policy = self.retries().policy();
        let Some(mut waiting) = background::schedule(policy, attempt, run.retry.as_ref(), now_ms())
        else {
            return Ok(());
        };
        // A provider that cannot take turns: the retry parks behind its model's probe.
        let parked = self
            .park_failure(
                run,
                &rec.session.model,
                fired_by_background,
                rec.parked_on.as_deref(),
            )
            .await?;
        if let Some((_, probe_at)) = &parked {
            waiting.fires_at = *probe_at;
        }
        let parked_on = parked.as_ref().map(|(model, _)| model.as_str());
        tracing::info!(
            session_id = %run.session_id, run_id = %run.id, attempt, fires_at = waiting.fires_at,
            parked_on, "a background retry is waiting"
        );
        store
            .set_waiting_retry(&run.session_id, &run.id, &waiting, parked_on)
            .await?;
        self.retries().wake();
        metrics().background_retry("scheduled");
        self.publish_session(&run.session_id).await?;
        Ok(())
    }

    /// Ends the session's waiting background retry (HTTP, CLI, MCP's stop); `conflict` when
    /// none is waiting. The failed turn stays, and an explicit retry of it still works.
    pub async fn cancel_waiting_retry(&self, session_id: &SessionId) -> Result<Session> {
        let (engine, session_id) = (self.clone(), session_id.clone());
        self.runs()
            .carry(async move { engine.end_waiting_retry(&session_id).await })
            .await
    }

    async fn end_waiting_retry(&self, session_id: &SessionId) -> Result<Session> {
        self.store().session(session_id).await?;
        let _guard = self.locks().lock(session_id).await?;
        if !self.store().clear_waiting_retry(session_id).await? {
            return Err(Refusal::NoWaitingRetry.into());
        }
        tracing::info!(session_id = %session_id, "the waiting background retry was cancelled");
        metrics().background_retry("cancelled");
        self.publish_session(session_id).await
    }

    /// Publishes the session as it is now (e.g. its waiting retry changed); answers it.
    pub(super) async fn publish_session(&self, session_id: &SessionId) -> Result<Session> {
        let session = self.store().session(session_id).await?.session;
        self.publish(session_id, Event::Session(session.clone()));
        Ok(session)
    }

    /// Starts the loop that fires due waiting retries until the server stops. It sleeps until
    /// the earliest waiting retry (at least `TICK`, at most `IDLE`), woken early when this
    /// instance leaves one: an idle server does not ask its database four times a second.
    pub fn fire_background_retries(&self) {
        let engine = self.clone();
        tokio::spawn(async move {
            loop {
                if let Err(e) = engine.fire_due().await {
                    tracing::warn!(error = %e, "could not fire background retries; trying again");
                }
                let wait = match engine.store().next_waiting_retry().await {
                    Ok(Some(at)) => {
                        let ms = u64::try_from(at.saturating_sub(now_ms())).unwrap_or(0);
                        Duration::from_millis(ms).clamp(TICK, IDLE)
                    }
                    Ok(None) => IDLE,
                    Err(e) => {
                        tracing::warn!(error = %e, "could not read the next background retry");
                        TICK
                    }
                };
                tokio::select! {
                    _ = engine.runs().stopping().cancelled() => return,
                    _ = engine.retries().woken() => {}
                    _ = tokio::time::sleep(wait) => {}
                }
            }
        });
    }

    async fn fire_due(&self) -> Result<()> {
        let mut free = Vec::new();
        // Parked turns go by their model's outage, not one by one.
        let mut parked: std::collections::BTreeMap<String, Vec<SessionId>> = Default::default();
        for (session_id, model) in self.store().due_waiting_retries(now_ms()).await? {
            match model {
                Some(m) => parked.entry(m).or_default().push(session_id),
                None => free.push(session_id),
            }
        }
        for (model, due) in parked {
            free.extend(self.fire_parked(&model, due).await?);
        }
        for session_id in free {
            self.fire_one(&session_id).await;
        }
        Ok(())
    }

    /// Fires the session's due waiting retry under its lock; answers whether it fired.
    pub(super) async fn fire_one(&self, session_id: &SessionId) -> bool {
        let _guard = match self.locks().lock_within(session_id, LOOP_LOCK_WAIT).await {
            Ok(guard) => guard,
            // Held elsewhere for long: it fires on a later pass.
            Err(e) => {
                tracing::warn!(session_id = %session_id, error = %e, "a due background retry waits for its session's lock");
                return false;
            }
        };
        match self.fire_locked(session_id).await {
            Ok(fired) => fired,
            Err(e) => {
                // The waiting retry stays (its end is in the retry's own transaction): it is
                // tried again on the next pass.
                tracing::warn!(session_id = %session_id, error = %e, "a due background retry could not fire; it stays waiting");
                false
            }
        }
    }

    /// Fires the session's due waiting retry, under its lock, if it still belongs to the
    /// session's last turn: that failed run, retryable. A waiting retry that no longer does
    /// (a newer turn came) ends without firing. Ending the wait and queueing the retry are
    /// one transaction. Answers whether it fired.
    async fn fire_locked(&self, session_id: &SessionId) -> Result<bool> {
        let store = self.store();
        // Under the lock, again: another instance may have fired it, someone cancelled it.
        let rec = store.session(session_id).await?;
        let Some(waiting) = rec.session.waiting_retry.filter(|w| w.fires_at <= now_ms()) else {
            return Ok(false);
        };
        let last = store.last_turn(session_id).await?;
        let belongs = last.as_ref().is_some_and(|r| {
            Some(&r.id) == rec.retry_run_id.as_ref()
                && r.status == RunStatus::Failed
                && r.retry.as_ref().is_some_and(|c| c.retryable)
        });
        if !belongs {
            tracing::info!(
                session_id = %session_id, for_run = ?rec.retry_run_id, last_turn = ?last.map(|r| r.id),
                "a waiting background retry outlived its turn; it ends without firing"
            );
            return self.end_stale(session_id).await.map(|()| false);
        }
        match self.retry_locked(session_id, None, false).await {
            Ok(r) => {
                metrics().background_retry("fired");
                tracing::info!(
                    session_id = %session_id, run_id = %r.run_id, attempt = waiting.attempt,
                    "a background retry fired"
                );
                Ok(true)
            }
            // Refused (busy, nothing failed): there is nothing for it to retry any more.
            Err(e)
                if matches!(
                    e.kind,
                    Kind::Refused(
                        Refusal::RetryBusy
                            | Refusal::LastTurnNotFailed { .. }
                            | Refusal::NoTurnToRetry
                    )
                ) =>
            {
                tracing::info!(session_id = %session_id, "a background retry found nothing to retry: {e}");
                self.end_stale(session_id).await.map(|()| false)
            }
            Err(e) => Err(e),
        }
    }

    /// Ends a waiting retry that can no longer fire, and announces the session.
    async fn end_stale(&self, session_id: &SessionId) -> Result<()> {
        if self.store().clear_waiting_retry(session_id).await? {
            metrics().background_retry("superseded");
            self.publish_session(session_id).await?;
        }
        Ok(())
    }
}
