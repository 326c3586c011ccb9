//! A run's step loop: streams each model step, relays its deltas to the session's
//! subscribers as they arrive, saves the text on a timer (never per delta), and executes the
//! tools a step asks for before the next one.
use super::attempts::open;
use super::runner::End;
use super::{step, Active, Engine};
use crate::llm::limits;
use crate::llm::tool_calls::AssembledCall;
use crate::llm::{ChatMessage, ChatRequest, ProviderError, StreamItem};
use crate::store::SessionCall;
use crate::wake::WhenWoken;
use app::wire::{Delta, Event, Message, RetryClass, Role, Run};
use futures::StreamExt;
use tokio::time::Instant;

/// The turn's loop (CONTRACT §6): stream a model step; when it asks for tools, execute and
/// record them and stream the next step with their results; until a step asks for none, or
/// the turn reaches `MULLIGAN_MAX_STEPS`.
pub(super) async fn stream_reply(
    engine: &Engine,
    run: &Run,
    reply: &Message,
    call: SessionCall,
    active: &Active,
    tokens: &mut u64,
) -> End {
    let turn = match turn_for(engine, run, call).await {
        Ok(t) => t,
        Err(e) => {
            return End::Refused {
                class: RetryClass::ServerError,
                message: limits::error_text(&e.to_string()),
            }
        }
    };
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
            tools: turn.offered.clone(),
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
            Some(Ok(StreamItem::Heard)) => {}
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

/// What every step of a run sends: the session's model, its conversation up to the run's
/// anchor (earlier replies' tool calls and results included), the tools offered, and the
/// tokens the session spent before the run.
struct Turn {
    model: String,
    messages: Vec<ChatMessage>,
    offered: std::sync::Arc<[crate::tools::Offered]>,
    spent: u64,
}

async fn turn_for(engine: &Engine, run: &Run, session: SessionCall) -> crate::error::Result<Turn> {
    let store = engine.store();
    let history = store.history(&run.anchor_message_id).await?;
    // One more read only for a conversation whose replies made tool calls.
    let mut calls = if history.iter().any(|m| m.has_calls) {
        store.tool_calls_of_session(&run.session_id).await?
    } else {
        Default::default()
    };
    let (offered, missing) = engine.turn_tools(run, &session.tools).await;
    let mut messages = Vec::with_capacity(history.len() + 1);
    if !missing.is_empty() {
        messages.push(ChatMessage::text(
            "system",
            step::missing_sources_note(&missing),
        ));
    }
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
        model: session.model,
        messages,
        offered,
        spent: u64::try_from(session.tokens_used).unwrap_or(0),
    })
}
