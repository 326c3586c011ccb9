//! Parking behind a model that is out (CONTRACT §7): a background session's turn that
//! failed because its provider could not take it waits behind the model's outage instead of
//! on its own countdown; the fire loop sends one probe per outage for the whole fleet, and
//! once a probe succeeds releases the parked turns at `MULLIGAN_RELEASE_PER_S`.
use super::Engine;
use crate::clock::now_ms;
use crate::error::Result;
use crate::retry::parking::{provider_unavailable, Claim, Failure, Outage};
use app::wire::{
    ModelList, ModelStatus, ProvenanceKind, ProviderHealth, Run, SessionId, SessionStatus,
};

impl Engine {
    /// The model a session's turns start on, as the catalogue names it.
    fn head_model(&self, session_model: &str) -> Option<String> {
        self.models()
            .catalogue()
            .resolve(session_model)
            .ok()
            .map(|m| m.id())
    }

    /// After `run` failed in a background session: when its provider could not take it, the
    /// turn parks behind its model's outage (opened, or extended when it was the probe).
    /// Answers the model and when the parked turns are next looked at; `None`: no parking.
    pub(super) async fn park_failure(
        &self,
        run: &Run,
        session_model: &str,
        fired_by_background: bool,
        parked_on: Option<&str>,
    ) -> Result<Option<(String, i64)>> {
        let Some(retry) = run
            .retry
            .as_ref()
            .filter(|r| provider_unavailable(&r.retry_class))
        else {
            return Ok(None);
        };
        let Some(model) = self.head_model(session_model) else {
            return Ok(None);
        };
        let parking = self.retries().parking();
        let parked = self.store().parked_count(&model, &run.session_id).await?;
        let failure = Failure {
            model: &model,
            session: run.session_id.as_str(),
            class: &retry.retry_class,
            advised_until: retry.retry_after_until,
            // A background retry fired from behind this model: the probe or a released turn.
            sent_by_release: fired_by_background && parked_on == Some(model.as_str()),
            parked,
        };
        let now = now_ms();
        let (outage, extended) = self
            .store()
            .change_outage(&model, |current| {
                let before = current.as_ref().map(|o| (o.failures, o.since));
                let after = parking.failed(current, failure, now);
                // The same outage failed once more (a new one starts at its first step).
                let extended =
                    before.is_some_and(|(f, since)| after.failures > f && after.since == since);
                (Some(after), extended)
            })
            .await?;
        let Some(outage) = outage else {
            return Ok(None);
        };
        if extended {
            tracing::info!(%model, failures = outage.failures, next_probe_at = outage.next_probe_at, "the probe failed: the parked turns wait longer");
            self.reschedule_parked(&model, outage.next_probe_at, None)
                .await?;
        }
        Ok(Some((model, outage.next_probe_at)))
    }

    /// After a background retry's run completed: when it was its model's probe (or one of the
    /// released turns), the turns parked behind the model go.
    pub(super) async fn parked_turn_completed(&self, run: &Run) -> Result<()> {
        let background = run
            .provenance
            .as_ref()
            .is_some_and(|p| p.kind == ProvenanceKind::AutoResume && p.manual == Some(false));
        if !background {
            return Ok(());
        }
        let Some(model) = self.store().session(&run.session_id).await?.parked_on else {
            return Ok(());
        };
        let (parking, now) = (self.retries().parking(), now_ms());
        let session = run.session_id.as_str();
        let (outage, _) = self
            .store()
            .change_outage(&model, |current| {
                (current.map(|o| parking.succeeded(o, session, now)), ())
            })
            .await?;
        if outage.is_some_and(|o| o.releasing) {
            tracing::info!(%model, "the model answered again: its parked turns are released");
            self.reschedule_parked(&model, now, None).await?;
            self.retries().wake();
        }
        Ok(())
    }

    /// Fires what may fire of the turns parked behind `model` that are due (soonest first):
    /// the probe, or the next released turn. Answers the sessions to fire as unparked (the
    /// outage ended).
    pub(super) async fn fire_parked(
        &self,
        model: &str,
        due: Vec<SessionId>,
    ) -> Result<Vec<SessionId>> {
        let Some(first) = due.first().cloned() else {
            return Ok(due);
        };
        let (parking, now) = (self.retries().parking(), now_ms());
        self.keep_a_running_probe(model, now).await?;
        let (outage, claim) = self
            .store()
            .change_outage(model, |current| match current {
                None => (None, None),
                Some(o) => {
                    let (claim, next) = parking.claim(&o, first.as_str(), now);
                    (Some(next), Some(claim))
                }
            })
            .await?;
        let (Some(outage), Some(claim)) = (outage, claim) else {
            return Ok(due);
        };
        match claim {
            Claim::Wait(at) => {
                if !outage.releasing {
                    // The probe's own retry stays as its claim left it: another instance may
                    // be firing it right now.
                    let probe = outage.probe_session.as_deref();
                    self.reschedule_parked(model, at, probe).await?;
                }
            }
            Claim::Probe | Claim::Release => {
                tracing::info!(%model, session_id = %first, ?claim, "a parked turn goes");
                // The outage is over once its last parked turn went (`Parking::failed`); the
                // row stays so that a released turn's failure still counts on it.
                let fired = self.fire_one(&first).await;
                if claim == Claim::Probe && !fired {
                    // Nothing was sent (the turn had ended meanwhile): the next one probes.
                    self.store()
                        .change_outage(model, |current| {
                            (
                                current.map(|o| Outage {
                                    probe_session: None,
                                    next_probe_at: now,
                                    ..o
                                }),
                                (),
                            )
                        })
                        .await?;
                }
            }
        }
        Ok(Vec::new())
    }

    /// A probe past its deadline whose session still runs a turn is not lost (a long tool
    /// turn): its deadline moves on, so no second probe goes. A dead instance's run is ended
    /// by the lease takeover, and then the next look probes again.
    async fn keep_a_running_probe(&self, model: &str, now: i64) -> Result<()> {
        let overdue = self.store().outage(model).await?;
        let Some(probe) = overdue
            .filter(|o| o.probe_overdue(now))
            .and_then(|o| o.probe_session)
        else {
            return Ok(());
        };
        let probe = SessionId::new(probe);
        if self.store().session(&probe).await?.session.status != SessionStatus::Running {
            return Ok(());
        }
        tracing::info!(%model, session_id = %probe, "the probe still runs: its deadline moves on");
        self.store()
            .change_outage(model, |current| {
                (current.map(|o| o.probe_still_running(now)), ())
            })
            .await?;
        Ok(())
    }

    /// Moves the turns parked behind `model` to `at` (the probe's, `except`, aside) and
    /// announces each moved session, so a page showing its waiting retry shows the new time.
    async fn reschedule_parked(&self, model: &str, at: i64, except: Option<&str>) -> Result<()> {
        for session_id in self.store().reschedule_parked(model, at, except).await? {
            // One session that cannot be read does not keep the others' news back.
            if let Err(e) = self.publish_session(&session_id).await {
                tracing::warn!(session_id = %session_id, error = %e.message, "cannot announce a parked turn's new time");
            }
        }
        Ok(())
    }

    /// The catalogue's models with their status: cooling by a provider's cooldown, down
    /// while turns are parked behind an outage.
    pub async fn models_now(&self) -> Result<ModelList> {
        Ok(self.models_and_outages().await?.0)
    }

    /// Each model not `ok`, as `GET /providers` reports it: since when, how many turns are
    /// parked behind it, when its next probe goes.
    pub async fn model_health(&self) -> Result<Vec<ProviderHealth>> {
        let (list, outages) = self.models_and_outages().await?;
        Ok(list
            .models
            .into_iter()
            .filter(|m| m.status != ModelStatus::Ok)
            .map(|m| {
                let outage = outages.iter().find(|(o, _)| o.model == m.id);
                ProviderHealth {
                    since: outage.map(|(o, _)| o.since),
                    waiting_turns: outage.map_or(0, |(_, w)| *w),
                    next_probe_at: outage.map(|(o, _)| o.next_probe_at).or(m.cooling_until),
                    model: m.id,
                    status: m.status,
                }
            })
            .collect())
    }

    /// The models with their status, and the outages with turns parked behind them (one
    /// read of each).
    async fn models_and_outages(&self) -> Result<(ModelList, Vec<(Outage, u32)>)> {
        let mut list = self.models().list(now_ms()).await;
        let mut outages = self.store().outages().await?;
        outages.retain(|(_, waiting)| *waiting > 0);
        for (outage, _) in &outages {
            if let Some(m) = list.models.iter_mut().find(|m| m.id == outage.model) {
                m.status = ModelStatus::Down;
                m.cooling_until = m.cooling_until.max(Some(outage.next_probe_at));
            }
        }
        Ok((list, outages))
    }
}
