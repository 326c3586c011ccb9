//! Opens a model step: through Tier 1 on each model of the session's fallback chain in
//! turn (CONTRACT §7: only before the step's first delta), recording each attempt of the run
//! and announcing each wait on SSE; after a context overflow it compacts the conversation
//! once and tries again.
use super::{compact, RunContext, RunTask};
use crate::clock::now_ms;
use crate::llm::catalogue::ModelRef;
use crate::llm::limits;
use crate::llm::{ChatRequest, ProviderError, RetryAfter};
use crate::retry::parking::provider_unavailable;
use crate::retry::{classify, tier1};
use app::wire::{AttemptEvent, Event, FellBack, RetryClass, Run, Served};
use futures::future::BoxFuture;
use std::time::Duration;

/// What a chain's failures add up to: the first model's failure, advising the earliest
/// moment any model of the chain may be asked again (none when one may be asked now).
struct ChainFailure {
    first: Option<ProviderError>,
    earliest: Option<i64>,
    /// A model failed without advising a wait: it may be asked again at once.
    free_now: bool,
}

impl ChainFailure {
    fn note(&mut self, err: ProviderError, until: Option<i64>) {
        match until {
            Some(u) => self.earliest = Some(self.earliest.map_or(u, |e| e.min(u))),
            None => self.free_now = true,
        }
        self.first.get_or_insert(err);
    }

    fn into_error(self, last: ProviderError) -> ProviderError {
        let Some(mut first) = self.first else {
            return last;
        };
        let earliest = self.earliest.filter(|_| !self.free_now);
        match (&mut first, earliest) {
            (ProviderError::Status { retry_after, .. }, Some(at)) => {
                *retry_after = Some(RetryAfter::At(at))
            }
            (ProviderError::CoolingDown { until, .. }, Some(at)) => *until = at,
            (ProviderError::Status { retry_after, .. }, None) => *retry_after = None,
            _ => {}
        }
        first
    }
}

impl RunTask {
    /// The models a step of this run tries, in order (one: no fallback).
    fn chain(&self) -> Vec<ModelRef> {
        let catalogue = self.ctx.models.catalogue();
        let Ok(model) = catalogue.resolve(&self.session.model) else {
            return Vec::new(); // the provider refuses it, with the reason
        };
        let own = self.session.fallbacks.as_deref().map(|names| {
            names
                .iter()
                .filter_map(|n| catalogue.resolve(n).ok())
                .collect::<Vec<_>>()
        });
        catalogue.chain(&model, own.as_deref())
    }

    /// The models of `chain` that are out (CONTRACT §7: an open outage this run is not the
    /// probe of, with turns parked behind it or its probe in flight; or, for a model with a
    /// fallback after it, resting until its probe time), each as the error that passes it
    /// over: its outage's class, askable again at its next probe. And the models with a
    /// fallback whose outage is due for a probe (a step that reaches one claims it first).
    async fn kept_out(&self, chain: &[ModelRef]) -> (Vec<(String, ProviderError)>, Vec<String>) {
        let outages = match self.ctx.store.outages().await {
            Ok(outages) => outages,
            Err(e) => {
                // Not knowing costs a Tier 1 round on a model that is out, nothing worse.
                tracing::warn!(error = %e, "cannot read the models' outages");
                return (Vec::new(), Vec::new());
            }
        };
        let (session, now) = (self.run.session_id.as_str(), now_ms());
        let parking = self.ctx.cfg.parking;
        let mut due = Vec::new();
        let out = outages
            .into_iter()
            .filter(|(o, _)| chain.iter().any(|m| m.id() == o.model))
            .filter_map(|(o, waiting)| {
                let fallback_after = chain.split_last().is_some_and(|(last, before)| {
                    last.id() != o.model && before.iter().any(|m| m.id() == o.model)
                });
                let out = o.blocks(session, waiting, now) || (fallback_after && o.resting(now));
                if !out {
                    if fallback_after && parking.claim_for_step(&o, session, now).is_some() {
                        due.push(o.model);
                    }
                    return None;
                }
                // While its probe is in flight the outage's time is the probe's deadline, not
                // a time to try again: advising it would push the next probe that far once
                // this failure parks behind the outage.
                let until = if o.probe_session.is_some() {
                    now
                } else {
                    o.next_probe_at
                };
                let err = ProviderError::CoolingDown {
                    class: o.class,
                    until,
                };
                Some((o.model, err))
            })
            .collect();
        (out, due)
    }

    /// Opens step `step` on the first model of the chain that takes it: a model that is out,
    /// or whose cooldown holds, is passed over without a request, one whose Tier 1 ends on a
    /// class the provider may lift ([`provider_unavailable`]) hands the step on. Records who
    /// answered.
    pub(super) async fn open(
        &mut self,
        request: ChatRequest,
        step: u32,
    ) -> Result<tier1::Opened, ProviderError> {
        let chain = self.chain();
        let Some((last, before)) = chain.split_last() else {
            return self.open_on(request, step, Target::SESSIONS).await;
        };
        let mut after = Vec::new();
        let mut failure = ChainFailure {
            first: None,
            earliest: None,
            free_now: false,
        };
        let (mut kept_out, due) = self.kept_out(&chain).await;
        let mut out = |model: &ModelRef| {
            let i = kept_out.iter().position(|(m, _)| *m == model.id())?;
            Some(kept_out.swap_remove(i).1)
        };
        for (i, model) in before.iter().enumerate() {
            let target = Target::in_chain(model, i, chain.len());
            let opened = match out(model) {
                Some(err) => Err(err),
                None => self.open_probing(&request, step, model, target, &due).await,
            };
            let err = match opened {
                Ok(opened) => {
                    self.model_answered(&model.id()).await;
                    self.served(step, model, after);
                    return Ok(opened);
                }
                Err(e) => e,
            };
            let class = classify::classify(&err, false, now_ms());
            let cooling = matches!(err, ProviderError::CoolingDown { .. });
            if !(cooling || provider_unavailable(&class.retry_class)) {
                return Err(failure.into_error(err));
            }
            if !cooling {
                // Tier 1 gave up on it: out for the next turns too, not only this step.
                self.model_gave_out(&model.id(), &class.retry_class, class.retry_after_until)
                    .await;
            }
            tracing::info!(%model, next = %chain[i + 1], class = %class.retry_class, "the model could not take the step: falling back");
            after.push(FellBack {
                model: model.id(),
                retry_class: class.retry_class.clone(),
            });
            failure.note(err, class.retry_after_until);
        }
        let target = Target::in_chain(last, before.len(), chain.len());
        let opened = match out(last) {
            Some(err) => Err(err),
            None => self.open_probing(&request, step, last, target, &due).await,
        };
        match opened {
            Ok(opened) => {
                self.model_answered(&last.id()).await;
                self.served(step, last, after);
                Ok(opened)
            }
            Err(e) => {
                // A probe this step claimed failed: the outage goes on, for longer.
                if self.tally.probing.iter().any(|m| *m == last.id()) {
                    let class = classify::classify(&e, false, now_ms());
                    if provider_unavailable(&class.retry_class) {
                        self.model_gave_out(
                            &last.id(),
                            &class.retry_class,
                            class.retry_after_until,
                        )
                        .await;
                    }
                }
                Err(failure.into_error(e))
            }
        }
    }

    /// [`Self::open_model`], first claiming the probe of the model's outage when it is due
    /// (`due`); passed over when another step claimed it first.
    async fn open_probing(
        &mut self,
        request: &ChatRequest,
        step: u32,
        model: &ModelRef,
        target: Target,
        due: &[String],
    ) -> Result<tier1::Opened, ProviderError> {
        if due.iter().any(|m| *m == model.id()) {
            self.claim_probe(&model.id()).await?;
        }
        self.open_model(request, step, model, target).await
    }

    /// Opens the step on `model` of the chain.
    async fn open_model(
        &mut self,
        request: &ChatRequest,
        step: u32,
        model: &ModelRef,
        target: Target,
    ) -> Result<tier1::Opened, ProviderError> {
        let mut attempt = request.clone();
        attempt.model = model.id();
        self.open_on(attempt, step, target).await
    }

    /// Records that `model` answered step `step` after passing over `after`.
    fn served(&mut self, step: u32, model: &ModelRef, after: Vec<FellBack>) {
        if !after.is_empty() {
            tracing::info!(step, %model, "a fallback model answered");
        }
        self.tally.served.push(Served {
            step,
            model: model.id(),
            after,
        });
    }

    /// Opens the provider stream on one model through Tier 1; after a context overflow,
    /// compacts the conversation once and tries again (a second overflow fails the run).
    async fn open_on(
        &mut self,
        mut request: ChatRequest,
        step: u32,
        target: Target,
    ) -> Result<tier1::Opened, ProviderError> {
        let ctx = &*self.ctx;
        let run = &self.run;
        let cfg = &ctx.cfg;
        // The run's attempts count on across its steps (kept in its tally, not read back).
        let mut attempts = RunAttempts {
            ctx,
            run,
            offset: self.tally.attempts,
            made: &mut self.tally.attempts,
            step,
            target,
        };
        let mut compacted = false;
        loop {
            let err = match tier1::open(
                &*ctx.provider,
                &request,
                &cfg.tier1,
                cfg.stream_idle,
                &mut attempts,
            )
            .await
            {
                Ok(opened) => return Ok(opened),
                Err(e) => e,
            };
            let overflow =
                classify::classify(&err, false, 0).retry_class == RetryClass::ContextOverflow;
            let smaller = if overflow && !compacted {
                compact::compact(&request.messages, cfg.context_tokens)
            } else {
                None
            };
            let Some(messages) = smaller else {
                return Err(err);
            };
            tracing::info!(
                from = request.messages.len(),
                to = messages.len(),
                "context overflow: compacting once"
            );
            if let Err(e) = ctx.store.mark_compacted(&run.id).await {
                tracing::warn!(error = %e, "could not record the compaction");
            }
            request.messages = messages.into();
            compacted = true;
            attempts.offset = *attempts.made;
        }
    }
}

/// Records each Tier 1 attempt of a run and announces each wait on SSE.
struct RunAttempts<'a> {
    ctx: &'a RunContext,
    run: &'a Run,
    /// Attempts made before this Tier 1 round (an earlier step, or before a compaction).
    offset: u32,
    /// Attempts made in the run so far.
    made: &'a mut u32,
    /// The model step this round opens.
    step: u32,
    target: Target,
}

/// Which model of the chain a Tier 1 round asks.
struct Target {
    /// The model its attempts record (`None`: the session's own).
    recorded: Option<String>,
    /// Whether a cooldown on it is slept out (the chain's last model) or passes it over.
    waits_out_cooldowns: bool,
}

impl Target {
    /// The session's model as it names it (one the catalogue cannot resolve).
    const SESSIONS: Target = Target {
        recorded: None,
        waits_out_cooldowns: true,
    };

    /// Model `i` of a chain of `len`: the first is the session's own (recorded without its
    /// name); a cooldown on any but the last passes it over at once.
    fn in_chain(model: &ModelRef, i: usize, len: usize) -> Target {
        Target {
            recorded: (i > 0).then(|| model.id()),
            waits_out_cooldowns: i + 1 == len,
        }
    }
}

impl tier1::Observer for RunAttempts<'_> {
    fn waits_out_cooldowns(&self) -> bool {
        self.target.waits_out_cooldowns
    }

    fn started(&mut self, n: u32) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let n = self.offset + n;
            *self.made = (*self.made).max(n);
            if n == 1 && self.target.recorded.is_none() {
                return; // recorded in the transaction that started the run (`Store::start_next`)
            }
            let started = self.ctx.store.attempt_started(
                &self.run.id,
                n,
                self.step,
                self.target.recorded.as_deref(),
            );
            if let Err(e) = started.await {
                tracing::warn!(error = %e, "could not record an attempt");
            }
        })
    }

    fn failed<'a>(
        &'a mut self,
        n: u32,
        err: &'a ProviderError,
        retry_in: Option<Duration>,
    ) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let retry_in_ms = retry_in.map(limits::millis);
            let reason = limits::error_text(&err.to_string());
            if let Err(e) = self
                .ctx
                .store
                .attempt_failed(&self.run.id, self.offset + n, &reason, retry_in_ms)
                .await
            {
                tracing::warn!(error = %e, "could not record an attempt");
            }
            if let Some(ms) = retry_in_ms {
                tracing::info!(attempt = n, retry_in_ms = ms, error = %err, "provider call failed; Tier 1 retries");
                let event = AttemptEvent {
                    run_id: self.run.id.clone(),
                    n: self.offset + n + 1,
                    retry_in_ms: ms,
                    reason,
                };
                self.ctx
                    .hub
                    .publish(&self.run.session_id, &Event::Attempt(event));
            }
        })
    }
}
