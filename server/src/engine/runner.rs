//! Executes one run: sends the conversation to the provider, relays each delta to the
//! session's subscribers as it arrives, saves the text on a timer (never per delta), and
//! records how the run ended.
use super::{compact, step, Active, Engine};
use crate::clock::now_ms;
use crate::llm::limits;
use crate::llm::tool_calls::AssembledCall;
use crate::llm::{ChatMessage, ChatRequest, ProviderError, StreamItem, ToolSpec};
use crate::retry::{classify, tier1};
use crate::store::Outcome;
use crate::wake::WhenWoken;
use app::wire::{AttemptEvent, Delta, Event, Message, RetryClass, Role, Run, RunStatus};
use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use std::panic::AssertUnwindSafe;
use std::time::Duration;
use tokio::time::Instant;

/// How a run's stream ended, before it is recorded.
enum End {
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
pub(super) async fn execute(engine: Engine, run: Run, reply: Message, active: Active) {
    let _leaves = Leaves {
        engine: engine.clone(),
        run_id: run.id.clone(),
        active: active.clone(),
    };
    let executed = AssertUnwindSafe(outcome_of(&engine, &run, &reply, &active))
        .catch_unwind()
        .await;
    let outcome = match executed {
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
async fn outcome_of(engine: &Engine, run: &Run, reply: &Message, active: &Active) -> Outcome {
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
        end = stream_reply(engine, run, reply, active, &mut tokens) => end,
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
    }
}

/// The turn's loop (CONTRACT §6): stream a model step; when it asks for tools, execute and
/// record them and stream the next step with their results; until a step asks for none, or
/// the turn reaches `MULLIGAN_MAX_STEPS`.
async fn stream_reply(
    engine: &Engine,
    run: &Run,
    reply: &Message,
    active: &Active,
    tokens: &mut u64,
) -> End {
    let turn = match turn_for(engine, run).await {
        Ok(t) => t,
        Err(e) => {
            return End::Refused {
                class: RetryClass::ServerError,
                message: limits::error_text(&e.to_string()),
            }
        }
    };
    let specs: Vec<ToolSpec> = turn
        .offered
        .iter()
        .map(|o| ToolSpec {
            name: o.model_name.clone(),
            description: o.description.clone(),
            input_schema: o.input_schema.clone(),
        })
        .collect();
    let mut messages = turn.messages;
    let mut tally = Tally {
        tokens,
        attempts: 0,
    };
    let max_steps = engine.inner.cfg.max_steps.max(1);
    let mut ord = 0u32;
    for step in 1..=max_steps {
        if let Some(limit) = engine.inner.cfg.spend_limit_tokens {
            let spent = turn.spent.saturating_add(*tally.tokens);
            if spent >= limit {
                return End::Refused {
                    class: RetryClass::SpendLimitExceeded,
                    message: format!(
                        "this session has used {spent} tokens of its {limit}-token budget: raise MULLIGAN_SPEND_LIMIT_TOKENS or start a new session"
                    ),
                };
            }
        }
        let request = ChatRequest {
            model: turn.model.clone(),
            messages: messages.clone(),
            tools: specs.clone(),
        };
        let text_from = active.live().text.len();
        let asked = match relay_step(engine, run, reply, active, &mut tally, request, step).await {
            Step::Ended(end) => return end,
            Step::Asked(calls) if calls.is_empty() => return End::Completed,
            Step::Asked(calls) => calls,
        };
        let text = active
            .live()
            .text
            .get(text_from..)
            .unwrap_or_default()
            .to_string();
        let asked = step::Asked {
            step,
            text,
            calls: asked,
        };
        match engine
            .execute_calls(run, &reply.id, active, &mut ord, asked, &turn.offered)
            .await
        {
            step::Executed::Done(more) => messages.extend(more),
            step::Executed::Cancelled => return End::Cancelled,
            step::Executed::Unrecorded(message) => {
                return End::Refused {
                    class: RetryClass::ServerError,
                    message,
                }
            }
        }
        if active.cancel.is_cancelled() {
            return End::Cancelled;
        }
    }
    End::Refused {
        class: RetryClass::MaxSteps,
        message: format!(
            "the turn reached its limit of {max_steps} model steps (MULLIGAN_MAX_STEPS) with the model still asking for tools"
        ),
    }
}

/// What a run's steps add up: the tokens the provider reported, the Tier 1 attempts made.
struct Tally<'a> {
    tokens: &'a mut u64,
    attempts: u32,
}

/// How one model step ended.
enum Step {
    /// The step is complete; these are the tool calls it asked for (none: the turn is done).
    Asked(Vec<AssembledCall>),
    /// The run ends here.
    Ended(End),
}

/// Opens one model step through Tier 1 and relays its deltas to the session's subscribers.
async fn relay_step(
    engine: &Engine,
    run: &Run,
    reply: &Message,
    active: &Active,
    tally: &mut Tally<'_>,
    request: ChatRequest,
    step: u32,
) -> Step {
    let opened = match open(engine, run, request, step, &mut tally.attempts).await {
        Ok(o) => o,
        Err(e) => return Step::Ended(End::Failed(e)),
    };
    active.live().steps = step;
    let idle = engine.inner.cfg.stream_idle;
    let mut stream = opened.stream;
    let mut head = opened.head.into_iter();
    let save_every = engine.inner.cfg.save_every;
    let max_reply = engine.inner.cfg.max_reply_bytes;
    let mut last_save = Instant::now();
    let mut unsaved = false;
    let mut asked = Vec::new();
    // One timer for the stall check, moved on only when it fires (not one per delta), and
    // polled only when it fires (not on each delta's wake-up).
    let mut heard = Instant::now();
    let mut stall = WhenWoken::new(tokio::time::sleep(idle));
    loop {
        let item = match head.next() {
            Some(item) => Some(Ok(item)),
            None => loop {
                tokio::select! {
                    biased;
                    item = stream.next() => {
                        heard = Instant::now();
                        break item;
                    }
                    () = &mut stall => {
                        let due = heard + idle;
                        if Instant::now() >= due {
                            break Some(Err(ProviderError::Stalled { idle }));
                        }
                        stall.get_mut().reset(due);
                    }
                }
            },
        };
        match item {
            Some(Ok(StreamItem::Delta(text))) => {
                let seq = {
                    let mut live = active.live();
                    if live.text.len().saturating_add(text.len()) > max_reply {
                        return Step::Ended(End::Refused {
                            class: RetryClass::ReplyTooLarge,
                            message: format!(
                                "the reply passed its limit of {max_reply} bytes (MULLIGAN_MAX_REPLY_BYTES); the text so far is kept"
                            ),
                        });
                    }
                    live.text.push_str(&text);
                    live.seq += 1;
                    live.seq
                };
                let delta = Delta {
                    run_id: run.id.clone(),
                    message_id: reply.id.clone(),
                    seq,
                    text,
                    step,
                };
                engine.publish(&run.session_id, Event::Delta(delta));
                unsaved = true;
            }
            Some(Ok(StreamItem::Usage { total_tokens })) => {
                *tally.tokens = tally.tokens.saturating_add(limits::tokens(total_tokens));
            }
            Some(Ok(StreamItem::ToolCalls(calls))) => asked = calls,
            Some(Ok(StreamItem::Done)) | None => {
                if unsaved && !asked.is_empty() {
                    save(engine, reply, active); // the text before the calls, before they run
                }
                return Step::Asked(asked);
            }
            Some(Err(e)) => return Step::Ended(End::Failed(e)),
        }
        // The save goes to the engine's saver (batched with every other run's): a busy
        // database delays the stored copy, never the deltas.
        if unsaved && last_save.elapsed() >= save_every {
            save(engine, reply, active);
            last_save = Instant::now();
            unsaved = false;
        }
    }
}

/// Hands the reply's text so far to the engine's saver.
fn save(engine: &Engine, reply: &Message, active: &Active) {
    let (text, seq) = {
        let live = active.live();
        (live.text.clone(), live.seq)
    };
    engine.inner.saver.save(super::saver::Save {
        message_id: reply.id.clone(),
        text,
        seq,
    });
}

/// Opens the provider stream through Tier 1; after a context overflow, compacts the
/// conversation once and tries again (a second overflow fails the run).
async fn open(
    engine: &Engine,
    run: &Run,
    mut request: ChatRequest,
    step: u32,
    made: &mut u32,
) -> Result<tier1::Opened, ProviderError> {
    let cfg = &engine.inner.cfg;
    let provider = &*engine.inner.provider;
    // The run's attempts count on across its steps (kept here, not read back per step).
    let mut attempts = RunAttempts {
        engine,
        run,
        offset: *made,
        made,
        step,
    };
    let mut compacted = false;
    loop {
        let err = match tier1::open(
            provider,
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
        if let Err(e) = engine.store().mark_compacted(&run.id).await {
            tracing::warn!(run = %run.id, error = %e, "could not record the compaction");
        }
        request.messages = messages;
        compacted = true;
        attempts.offset = *attempts.made;
    }
}

/// Records each Tier 1 attempt of a run and announces each wait on SSE.
struct RunAttempts<'a> {
    engine: &'a Engine,
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
                return; // recorded in the transaction that started the run (`Store::start_run`)
            }
            let started = self
                .engine
                .store()
                .attempt_started(&self.run.id, n, self.step);
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
                .engine
                .store()
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
                self.engine
                    .publish(&self.run.session_id, Event::Attempt(event));
            }
        })
    }
}

/// What every step of a run sends: the session's model, its conversation up to the run's
/// anchor (earlier replies' tool calls and results included), the tools offered, and the
/// tokens the session spent before the run.
struct Turn {
    model: String,
    messages: Vec<ChatMessage>,
    offered: Vec<crate::tools::Offered>,
    spent: u64,
}

async fn turn_for(engine: &Engine, run: &Run) -> crate::error::Result<Turn> {
    let store = engine.store();
    // Reads at once (SQLite's WAL and PostgreSQL both serve them side by side).
    let ((model, spent, sources), history) = futures::try_join!(
        store.model_and_spend(&run.session_id),
        store.history(&run.anchor_message_id)
    )?;
    // One more read only for a conversation whose replies made tool calls.
    let mut calls = if history.iter().any(|m| m.has_calls) {
        store.tool_calls_of_session(&run.session_id).await?
    } else {
        Default::default()
    };
    let mut messages = Vec::with_capacity(history.len());
    for m in history {
        match m.role {
            Role::Operator => messages.push(ChatMessage::text("user", m.content)),
            Role::Agent => match calls.remove(&m.id) {
                Some(calls) => messages.extend(step::conversation_of(&m.content, &calls)),
                None => messages.push(ChatMessage::text("assistant", m.content)),
            },
        }
    }
    Ok(Turn {
        model,
        messages,
        offered: engine.tools().offered(&sources),
        spent: u64::try_from(spent).unwrap_or(0),
    })
}
