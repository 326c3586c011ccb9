//! Executing one run: its stream (the step loop is `turn`) under its cancel, the server's
//! stop and the run's time limit, a panic caught, and how the run ended said as an outcome
//! to record.
use super::{Active, Builtins, End, RunContext, RunTask, Tally};
use crate::clock::now_ms;
use crate::llm::{limits, ProviderError};
use crate::retry::classify;
use crate::store::{Outcome, Started};
use crate::wake::WhenWoken;
use app::wire::{RetryClass, Run, RunStatus};
use futures::FutureExt;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

impl RunTask {
    /// The task of a run the store just started; `active` is its handle in the engine's
    /// registry of the runs executing here.
    pub fn new(
        ctx: Arc<RunContext>,
        builtins: Arc<dyn Builtins>,
        started: Started,
        active: Active,
    ) -> RunTask {
        let Started {
            run,
            reply,
            call,
            resumed,
        } = started;
        let mut tally = Tally::default();
        if resumed.is_some() {
            // It goes on from what it recorded: its text, its steps, its attempts' numbers.
            let mut live = active.live();
            live.text = reply.content.clone();
            live.seq = reply.delta_seq.unwrap_or(0);
            live.steps = run.steps;
            live.tool_calls = 1;
            tally.attempts = run.tier1_attempts;
            tally.served = run.served.clone();
        }
        RunTask {
            ctx,
            builtins,
            run,
            reply,
            session: call,
            active,
            tally,
            resumed,
        }
    }

    /// The run as the store started it.
    pub fn run(&self) -> &Run {
        &self.run
    }

    /// Its handle in the engine's registry: its cancel and live text.
    pub fn active(&self) -> &Active {
        &self.active
    }

    /// Executes the run and answers it with how to record its end, whatever happens: a panic
    /// anywhere in executing it is caught and recorded as `failed`/`internal` (retryable).
    pub async fn execute(mut self) -> (Run, Outcome) {
        let executed = AssertUnwindSafe(self.outcome()).catch_unwind().await;
        let mut outcome = match executed {
            Ok(outcome) => outcome,
            Err(panic) => {
                let what = panic_text(&*panic);
                tracing::error!(panic = %what, "the runner panicked; the run fails as internal");
                let content = std::mem::take(&mut self.active.live().text);
                outcome(
                    RunStatus::Failed,
                    content,
                    Some(format!(
                        "Mulligan failed this run internally ({}); retrying it is safe",
                        limits::truncate(&what, 200)
                    )),
                    Some(classify::of(RetryClass::Internal, None)),
                    0,
                )
            }
        };
        outcome.tool_calls_recorded = self.active.live().tool_calls > 0;
        outcome.served = std::mem::take(&mut self.tally.served);
        if outcome.status == RunStatus::Completed {
            outcome.stop_reason = self.tally.agent_stop.take();
        }
        crate::metrics::metrics().run_ended(outcome.status);
        (self.run, outcome)
    }

    /// Streams the run and says how to record its end.
    async fn outcome(&mut self) -> Outcome {
        // Waiting for a decision is not run time: a resumed run has what it had left.
        let used =
            std::time::Duration::from_millis(u64::try_from(self.resumed.unwrap_or(0)).unwrap_or(0));
        let max_run = self.ctx.cfg.max_run.saturating_sub(used);
        let limit_s = self.ctx.cfg.max_run.as_secs();
        let (ctx, active) = (self.ctx.clone(), self.active.clone());
        // Polled only when they are woken, not on each of the stream's wake-ups (the stopping
        // token is shared by every run: polling it takes its lock).
        let cancelled = WhenWoken::new(active.cancel.cancelled());
        let stopping = WhenWoken::new(ctx.stopping.cancelled());
        let waited = active.waited.clone();
        let began = tokio::time::Instant::now();
        let limit = WhenWoken::new(async move {
            // The limit moves on by the time spent waiting for the operator, and never
            // falls during such a wait.
            let mut due = began + max_run;
            loop {
                tokio::time::sleep_until(due).await;
                let (spent_waiting, waiting) = waited.read();
                let now = tokio::time::Instant::now();
                let limit = began + max_run + spent_waiting;
                if !waiting && now >= limit {
                    break;
                }
                due = limit.max(now + std::time::Duration::from_secs(1));
            }
        });
        let end = tokio::select! {
            biased;
            _ = cancelled => End::Cancelled,
            _ = stopping => End::Stopping,
            end = self.stream() => end,
            () = limit => End::Failed(ProviderError::Timeout {
                message: format!(
                    "the run took longer than its limit of {} s (MULLIGAN_MAX_RUN_MS)",
                    limit_s
                ),
            }),
        };
        // A cancel wins over whatever the provider reported meanwhile.
        let end = if active.cancel.is_cancelled() {
            End::Cancelled
        } else {
            end
        };
        // Copied, not taken: until its end is recorded the run is still live, and a reader of
        // the session is shown this text, never an empty reply.
        let (content, opened) = {
            let live = active.live();
            let mut text = String::with_capacity(live.text.len() + live.held.len());
            text.push_str(&live.text);
            text.push_str(&live.held);
            (text, live.steps > 0)
        };
        // What the provider reported, but never less than the reply's own size suggests (a
        // provider cannot stream past the spend limit by reporting few tokens). A resumed run
        // counts only what it added: its text before the wait was counted when it parked.
        let added = content.len().saturating_sub(self.reply.content.len());
        let estimate = u64::try_from(added / 4).unwrap_or(u64::MAX);
        let tokens = limits::tokens(self.tally.tokens.max(estimate));
        let started = !content.is_empty();
        let run = &self.run;
        match end {
            End::Completed => outcome(RunStatus::Completed, content, None, None, tokens),
            End::Cancelled => outcome(RunStatus::Cancelled, content, None, None, tokens),
            End::AwaitingApproval(asked) => Outcome {
                asked,
                ..outcome(RunStatus::AwaitingApproval, content, None, None, tokens)
            },
            End::Stopping => failed(
                content,
                "the server stopped while this reply was being written".into(),
                classify::of(RetryClass::Interrupted, None),
                tokens,
            ),
            End::Refused { class, message } => {
                tracing::info!(class = class.as_str(), "run refused: {message}");
                // The first attempt was recorded as the run started; it ends here, unsent.
                if !opened {
                    if let Err(e) = ctx.store.attempt_failed(&run.id, 1, &message, None).await {
                        tracing::warn!(error = %e, "could not record an attempt");
                    }
                }
                failed(content, message, classify::of(class, None), tokens)
            }
            End::Failed(err) => {
                let class = classify::classify(&err, started, now_ms());
                let message = limits::error_text(&err.to_string());
                tracing::info!(class = %class.retry_class, error = %message, "run failed");
                failed(content, message, class, tokens)
            }
        }
    }
}

/// A panic's message, when it has one.
fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".into())
}

/// A failed run's outcome: why, and how it may be retried.
fn failed(
    content: String,
    message: String,
    class: app::wire::RetryClassification,
    tokens: u64,
) -> Outcome {
    outcome(
        RunStatus::Failed,
        content,
        Some(message),
        Some(class),
        tokens,
    )
}

fn outcome(
    status: RunStatus,
    content: String,
    error_message: Option<String>,
    retry: Option<app::wire::RetryClassification>,
    tokens: u64,
) -> Outcome {
    Outcome {
        status,
        content,
        error_message,
        retry,
        tokens_used: i64::try_from(tokens).unwrap_or(i64::MAX),
        tool_calls_recorded: true,
        served: Vec::new(),
        asked: Vec::new(),
        stop_reason: None,
    }
}
