//! A step's own part in its models' outages (CONTRACT §7): a model whose Tier 1 gave up on
//! a step with a fallback after it is out for the next turns too (its outage opened, or
//! extended when the step was its probe); once due, the first step to reach it probes it,
//! and the probe's step opening ends the outage. Nothing here is on a delta's path: only a
//! failure, a due probe and its answer write.
use super::RunTask;
use crate::clock::now_ms;
use crate::llm::ProviderError;
use crate::retry::parking::{Failure, Outage};
use app::wire::RetryClass;

impl RunTask {
    /// Claims the probe of `model`'s due outage for this step. `Err` with the error that
    /// passes the model over when another step claimed it first.
    pub(super) async fn claim_probe(&mut self, model: &str) -> Result<(), ProviderError> {
        let (parking, session) = (self.ctx.cfg.parking, self.run.session_id.as_str());
        let now = now_ms();
        let claimed = self
            .ctx
            .store
            .change_outage(model, |current| match current {
                Some(o) => match parking.claim_for_step(&o, session, now) {
                    Some(probing) => (Some(probing), Ok(())),
                    None => {
                        let class = o.class.clone();
                        (Some(o), Err(class))
                    }
                },
                None => (None, Ok(())),
            })
            .await;
        match claimed {
            Ok((_, Ok(()))) => {
                tracing::info!(%model, "this step probes the model's outage");
                self.tally.probing.push(model.to_string());
                Ok(())
            }
            Ok((_, Err(class))) => Err(ProviderError::CoolingDown { class, until: now }),
            Err(e) => {
                // Not knowing costs one more request to a model that may be out.
                tracing::warn!(%model, error = %e, "could not claim the model's probe");
                Ok(())
            }
        }
    }

    /// `model` took this step: when the step was its probe, its outage is over.
    pub(super) async fn model_answered(&mut self, model: &str) {
        let Some(i) = self.tally.probing.iter().position(|m| m == model) else {
            return;
        };
        self.tally.probing.swap_remove(i);
        let (parking, session) = (self.ctx.cfg.parking, self.run.session_id.as_str());
        let now = now_ms();
        let changed = self
            .ctx
            .store
            .change_outage(model, |current| {
                (current.map(|o| parking.succeeded(o, session, now)), ())
            })
            .await;
        match changed {
            Ok(_) => tracing::info!(%model, "the probe's step opened: the model's outage is over"),
            Err(e) => tracing::warn!(%model, error = %e, "could not end the model's outage"),
        }
    }

    /// Tier 1 gave up on `model` for this step with `class` (the provider cannot take turns
    /// now) and the step goes on to a fallback: the model is out for the next turns too.
    pub(super) async fn model_gave_out(
        &mut self,
        model: &str,
        class: &RetryClass,
        advised_until: Option<i64>,
    ) {
        self.tally.probing.retain(|m| m != model);
        let (parking, session) = (self.ctx.cfg.parking, self.run.session_id.clone());
        let store = &self.ctx.store;
        let parked = store.parked_count(model, &session).await.unwrap_or(0);
        let now = now_ms();
        let failure = Failure {
            model,
            session: session.as_str(),
            class,
            advised_until,
            sent_by_release: false,
            parked,
        };
        let changed = store
            .change_outage(model, |current: Option<Outage>| {
                (Some(parking.failed(current, failure, now)), ())
            })
            .await;
        match changed {
            Ok((Some(o), ())) => {
                tracing::info!(%model, failures = o.failures, next_probe_at = o.next_probe_at, "the model failed a step: the next turns pass it over until its probe")
            }
            Ok((None, ())) => {}
            Err(e) => tracing::warn!(%model, error = %e, "could not record the model's outage"),
        }
    }
}
