//! Opens a model step through Tier 1: records each attempt of the run, announces each wait
//! on SSE, and after a context overflow compacts the conversation once and tries again.
use super::{compact, RunContext, RunTask};
use crate::llm::limits;
use crate::llm::{ChatRequest, ProviderError};
use crate::retry::{classify, tier1};
use app::wire::{AttemptEvent, Event, RetryClass, Run};
use futures::future::BoxFuture;
use std::time::Duration;

impl RunTask {
    /// Opens the provider stream through Tier 1; after a context overflow, compacts the
    /// conversation once and tries again (a second overflow fails the run).
    pub(super) async fn open(
        &mut self,
        mut request: ChatRequest,
        step: u32,
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
            tracing::info!(run = %run.id, from = request.messages.len(), to = messages.len(), "context overflow: compacting once");
            if let Err(e) = ctx.store.mark_compacted(&run.id).await {
                tracing::warn!(run = %run.id, error = %e, "could not record the compaction");
            }
            request.messages = messages;
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
}

impl tier1::Observer for RunAttempts<'_> {
    fn started(&mut self, n: u32) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let n = self.offset + n;
            *self.made = (*self.made).max(n);
            if n == 1 {
                return; // recorded in the transaction that started the run (`Store::start_next`)
            }
            let started = self.ctx.store.attempt_started(&self.run.id, n, self.step);
            if let Err(e) = started.await {
                tracing::warn!(run = %self.run.id, error = %e, "could not record an attempt");
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
                tracing::warn!(run = %self.run.id, error = %e, "could not record an attempt");
            }
            if let Some(ms) = retry_in_ms {
                tracing::info!(run = %self.run.id, attempt = n, retry_in_ms = ms, error = %err, "provider call failed; Tier 1 retries");
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
