//! Executes one run as a task: streams it (the step loop is `stream`) under its cancel, the
//! server's stop and the run's time limit, catches a panic, and records how the run ended.
use super::stream::stream_reply;
use super::{Active, Engine};
use crate::clock::now_ms;
use crate::llm::{limits, ProviderError};
use crate::retry::classify;
use crate::store::{Outcome, SessionCall};
use crate::wake::WhenWoken;
use app::wire::{Message, RetryClass, Run, RunStatus};
use futures::FutureExt;
use std::panic::AssertUnwindSafe;

/// How a run's stream ended, before it is recorded.
pub(super) enum End {
    Completed,
    Failed(ProviderError),
    Cancelled,
    /// The server is stopping: the run is recorded as interrupted.
    Stopping,
    /// Failed before or without the provider (spend limit, the server itself), or ended by
    /// one of Mulligan's own limits (a reply too large).
    Refused {
        class: RetryClass,
        message: String,
    },
}

/// Executes the run and records its end, whatever happens: a panic anywhere in executing it
/// is caught and recorded as `failed`/`internal` (retryable), and the run leaves this
/// instance's active set (waking a waiting cancel) even if recording it panics too.
pub(super) async fn execute(
    engine: Engine,
    run: Run,
    reply: Message,
    call: SessionCall,
    active: Active,
) {
    let _leaves = Leaves {
        engine: engine.clone(),
        run_id: run.id.clone(),
        active: active.clone(),
    };
    let executed = AssertUnwindSafe(outcome_of(&engine, &run, &reply, call, &active))
        .catch_unwind()
        .await;
    let mut outcome = match executed {
        Ok(outcome) => outcome,
        Err(panic) => {
            let what = panic_text(&*panic);
            tracing::error!(run = %run.id, panic = %what, "the runner panicked; the run fails as internal");
            let content = std::mem::take(&mut active.live().text);
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
    outcome.tool_calls_recorded = active.live().tool_calls > 0;
    crate::metrics::metrics().run_ended(outcome.status);
    engine.finish(&run, outcome).await;
}

/// Takes a run out of this instance's active set when its task ends, however it ends.
struct Leaves {
    engine: Engine,
    run_id: String,
    active: Active,
}

impl Drop for Leaves {
    fn drop(&mut self) {
        let _ = self.engine.forget_active(&self.run_id);
        self.active.ended.notify_waiters();
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

/// Streams the run and says how to record its end.
async fn outcome_of(
    engine: &Engine,
    run: &Run,
    reply: &Message,
    call: SessionCall,
    active: &Active,
) -> Outcome {
    let mut tokens = 0u64;
    let max_run = engine.inner.cfg.max_run;
    // Polled only when they are woken, not on each of the stream's wake-ups (the stopping
    // token is shared by every run: polling it takes its lock).
    let cancelled = WhenWoken::new(active.cancel.cancelled());
    let stopping = WhenWoken::new(engine.inner.stopping.cancelled());
    let limit = WhenWoken::new(tokio::time::sleep(max_run));
    let end = tokio::select! {
        biased;
        _ = cancelled => End::Cancelled,
        _ = stopping => End::Stopping,
        end = stream_reply(engine, run, reply, call, active, &mut tokens) => end,
        () = limit => End::Failed(ProviderError::Timeout {
            message: format!(
                "the run took longer than its limit of {} s (MULLIGAN_MAX_RUN_MS)",
                max_run.as_secs()
            ),
        }),
    };
    // A cancel wins over whatever the provider reported meanwhile.
    let end = if active.cancel.is_cancelled() {
        End::Cancelled
    } else {
        end
    };
    let (content, opened) = {
        let mut live = active.live();
        (std::mem::take(&mut live.text), live.steps > 0)
    };
    // What the provider reported, but never less than the reply's own size suggests (a
    // provider cannot stream past the spend limit by reporting few tokens).
    let estimate = u64::try_from(content.len() / 4).unwrap_or(u64::MAX);
    let tokens = limits::tokens(tokens.max(estimate));
    let started = !content.is_empty();
    match end {
        End::Completed => outcome(RunStatus::Completed, content, None, None, tokens),
        End::Cancelled => outcome(RunStatus::Cancelled, content, None, None, tokens),
        End::Stopping => outcome(
            RunStatus::Failed,
            content,
            Some("the server stopped while this reply was being written".into()),
            Some(classify::of(RetryClass::Interrupted, None)),
            tokens,
        ),
        End::Refused { class, message } => {
            tracing::info!(run = %run.id, class = class.as_str(), "run refused: {message}");
            // The first attempt was recorded as the run started; it ends here, unsent.
            if !opened {
                if let Err(e) = engine
                    .store()
                    .attempt_failed(&run.id, 1, &message, None)
                    .await
                {
                    tracing::warn!(run = %run.id, error = %e, "could not record an attempt");
                }
            }
            let class = classify::of(class, None);
            outcome(
                RunStatus::Failed,
                content,
                Some(message),
                Some(class),
                tokens,
            )
        }
        End::Failed(err) => {
            let class = classify::classify(&err, started, now_ms());
            let message = limits::error_text(&err.to_string());
            tracing::info!(run = %run.id, class = %class.retry_class, error = %message, "run failed");
            outcome(
                RunStatus::Failed,
                content,
                Some(message),
                Some(class),
                tokens,
            )
        }
    }
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
    }
}
