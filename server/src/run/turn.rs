//! A run's step loop: streams each model step, relays its deltas to the session's
//! subscribers as they arrive, saves the text on a timer (never per delta), and executes the
//! tools a step asks for before the next one.
use super::calls::{missing_sources_note, Asked, Executed};
use super::conversation::conversation_of;
use super::saver::Save;
use super::{End, RunTask};
use crate::llm::limits;
use crate::llm::tool_calls::AssembledCall;
use crate::llm::{ChatMessage, ChatRequest, ProviderError, StreamItem};
use crate::wake::WhenWoken;
use app::wire::{Delta, Event, RetryClass, Role, FAST_TEXT_BYTES};
use futures::StreamExt;
use std::time::Duration;
use tokio::time::Instant;

/// The window while text comes faster than it is read, in windows: a third as many events
/// (each a task on a page's main thread, bench B10), drawn as often as the page draws such
/// text anyway (`DRAW_FAST_EVERY_MS`).
const FAST_WINDOWS: u32 = 3;
/// The longest a delta is ever held.
const MAX_DELTA_GAP: Duration = Duration::from_secs(1);

/// The least time from a delta that held `sent` bytes to the next: the window, or
/// [`FAST_WINDOWS`] of it after a delta of more than [`FAST_TEXT_BYTES`].
fn delta_gap(window: Duration, sent: usize) -> Duration {
    if sent > FAST_TEXT_BYTES {
        window
            .saturating_mul(FAST_WINDOWS)
            .min(MAX_DELTA_GAP.max(window))
    } else {
        window
    }
}

/// How one model step ended.
pub(super) enum Step {
    /// The step is complete; these are the tool calls it asked for (none: the turn is done).
    Asked(Vec<AssembledCall>),
    /// The run ends here.
    Ended(End),
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

impl RunTask {
    /// The turn's loop (CONTRACT §6): stream a model step; when it asks for tools, execute
    /// and record them and stream the next step with their results; until a step asks for
    /// none, or the turn reaches `MULLIGAN_MAX_STEPS`.
    pub(super) async fn stream(&mut self) -> End {
        if let Some(provider) = self.agent_provider() {
            return self.agent_turn(provider).await;
        }
        let turn = match self.turn().await {
            Ok(t) => t,
            Err(e) => {
                return End::Refused {
                    class: RetryClass::ServerError,
                    message: limits::error_text(&e.to_string()),
                }
            }
        };
        let mut messages = turn.messages;
        let max_steps = self.ctx.cfg.max_steps.max(1);
        let mut first_step = 1;
        if self.resumed.is_some() {
            // A run resumed after its calls were decided (CONTRACT §8): its last step's calls
            // run now, and the turn goes on from the steps it recorded.
            let recorded = match self.ctx.store.tool_calls_of_message(&self.reply.id).await {
                Ok(r) => r,
                Err(e) => {
                    return End::Refused {
                        class: RetryClass::ServerError,
                        message: limits::error_text(&format!(
                            "could not read the decided tool calls: {e}"
                        )),
                    }
                }
            };
            self.tally.calls = u32::try_from(recorded.len()).unwrap_or(u32::MAX);
            first_step = recorded
                .iter()
                .map(|c| c.call.step)
                .max()
                .unwrap_or(0)
                .saturating_add(1);
            let recorded = match self.execute_decided(recorded, &turn.offered).await {
                Ok(r) => r,
                Err(Executed::Cancelled) => return End::Cancelled,
                Err(Executed::Unrecorded(message)) => {
                    return End::Refused {
                        class: RetryClass::ServerError,
                        message,
                    }
                }
                Err(_) => return End::Cancelled,
            };
            let content = self.active.live().text.clone();
            messages.extend(conversation_of(&content, &recorded));
            if self.active.cancel.is_cancelled() {
                return End::Cancelled;
            }
        }
        for step in first_step..=max_steps {
            if let Some(limit) = self.ctx.cfg.spend_limit_tokens {
                let spent = turn.spent.saturating_add(self.tally.tokens);
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
                messages: messages.as_slice().into(),
                tools: turn.offered.clone(),
            };
            let text_from = self.active.live().text.len();
            let asked = match self.relay_step(request, step).await {
                Step::Ended(end) => return end,
                Step::Asked(calls) if calls.is_empty() => return End::Completed,
                Step::Asked(calls) => calls,
            };
            let text = self
                .active
                .live()
                .text
                .get(text_from..)
                .unwrap_or_default()
                .to_string();
            let asked = Asked {
                step,
                text,
                calls: asked,
            };
            match self.execute_calls(asked, &turn.offered).await {
                Executed::Done(more) => messages.extend(more),
                Executed::Cancelled => return End::Cancelled,
                Executed::Awaiting(asked) => return End::AwaitingApproval(asked),
                Executed::Unrecorded(message) => {
                    return End::Refused {
                        class: RetryClass::ServerError,
                        message,
                    }
                }
            }
            if self.active.cancel.is_cancelled() {
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

    /// Opens one model step through Tier 1 and relays its deltas to the session's subscribers:
    /// at most one delta per `delta_window` (the first at once; text heard sooner waits in
    /// `Live::held`, at most that long; [`delta_gap`] when text comes faster than it is
    /// read), so a provider streaming a token a millisecond costs every subscriber, the log
    /// and each page one event a window, not one a token.
    async fn relay_step(&mut self, request: ChatRequest, step: u32) -> Step {
        let opened = match self.open(request, step).await {
            Ok(o) => o,
            Err(e) => return Step::Ended(End::Failed(e)),
        };
        self.active.live().steps = step;
        let idle = self.ctx.cfg.stream_idle;
        self.relay(opened.stream, opened.head, step, idle).await
    }

    /// Relays an opened stream (a model step's, or an agent turn's) as [`Self::relay_step`]
    /// says; `idle`: the longest it may send nothing.
    pub(super) async fn relay(
        &mut self,
        mut stream: crate::llm::DeltaStream,
        head: Vec<StreamItem>,
        step: u32,
        idle: Duration,
    ) -> Step {
        let cfg = &self.ctx.cfg;
        let (save_every, max_reply) = (cfg.save_every, cfg.max_reply_bytes);
        let window = cfg.delta_window;
        let mut head = head.into_iter();
        let mut last_save = Instant::now();
        let mut unsaved = false;
        let mut asked = Vec::new();
        // When the last delta went out, and the timer that sends the held text (armed only
        // while some is held).
        let mut sent_at: Option<Instant> = None;
        let mut gap = window;
        let send_held = tokio::time::sleep(Duration::ZERO);
        tokio::pin!(send_held);
        let mut holding = false;
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
                        () = &mut send_held, if holding => {
                            holding = false;
                            gap = delta_gap(window, self.send_held(step));
                            sent_at = Some(Instant::now());
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
                    {
                        let mut live = self.active.live();
                        let size = live.text.len().saturating_add(live.held.len());
                        if size.saturating_add(text.len()) > max_reply {
                            return Step::Ended(End::Refused {
                                class: RetryClass::ReplyTooLarge,
                                message: format!(
                                    "the reply passed its limit of {max_reply} bytes (MULLIGAN_MAX_REPLY_BYTES); the text so far is kept"
                                ),
                            });
                        }
                        live.held.push_str(&text);
                    }
                    let due = sent_at.map(|at| at + gap);
                    match due.filter(|due| *due > Instant::now()) {
                        // Within the window of the last delta: it goes out when that ends.
                        Some(due) => {
                            if !holding {
                                holding = true;
                                send_held.as_mut().reset(due);
                            }
                        }
                        None => {
                            holding = false;
                            gap = delta_gap(window, self.send_held(step));
                            sent_at = Some(Instant::now());
                        }
                    }
                    unsaved = true;
                }
                Some(Ok(StreamItem::Usage { total_tokens })) => {
                    self.tally.tokens = self
                        .tally
                        .tokens
                        .saturating_add(limits::tokens(total_tokens));
                }
                Some(Ok(StreamItem::ToolCalls(calls))) => asked = calls,
                Some(Ok(StreamItem::AgentCall(call))) => {
                    if let Err(end) = self.agent_call(call, step).await {
                        return Step::Ended(end);
                    }
                }
                Some(Ok(StreamItem::AgentAsk(ask))) => {
                    self.send_held(step);
                    if let Err(end) = self.agent_ask(ask, step).await {
                        return Step::Ended(end);
                    }
                    // Waiting for the operator is not the agent going quiet.
                    heard = Instant::now();
                    stall.get_mut().reset(heard + idle);
                }
                Some(Ok(StreamItem::Heard)) => {}
                Some(Ok(StreamItem::Done)) | None => {
                    self.send_held(step);
                    if unsaved && !asked.is_empty() {
                        self.save(); // the text before the calls, before they run
                    }
                    return Step::Asked(asked);
                }
                Some(Err(e)) => {
                    // What came before the failure is the reply's, and its subscribers'.
                    self.send_held(step);
                    return Step::Ended(End::Failed(e));
                }
            }
            // The save goes to the context's saver (batched with every other run's): a busy
            // database delays the stored copy, never the deltas.
            if unsaved && last_save.elapsed() >= save_every {
                self.save();
                last_save = Instant::now();
                unsaved = false;
            }
        }
    }

    /// Sends the held text as the reply's next delta (nothing if none is held); how many
    /// bytes it held.
    pub(super) fn send_held(&self, step: u32) -> usize {
        let (text, seq) = {
            let mut live = self.active.live();
            if live.held.is_empty() {
                return 0;
            }
            let text = std::mem::take(&mut live.held);
            live.text.push_str(&text);
            live.seq += 1;
            (text, live.seq)
        };
        let sent = text.len();
        self.publish(Event::Delta(Delta {
            run_id: self.run.id.clone(),
            message_id: self.reply.id.clone(),
            seq,
            text,
            step,
        }));
        sent
    }

    /// Hands the reply's text so far to the saver.
    fn save(&self) {
        let (text, seq) = {
            let live = self.active.live();
            (live.text.clone(), live.seq)
        };
        self.ctx.saver.save(Save {
            message_id: self.reply.id.to_string(),
            text,
            seq,
        });
    }

    /// What every step of the run sends.
    async fn turn(&self) -> crate::error::Result<Turn> {
        let (store, run) = (&self.ctx.store, &self.run);
        let history = store.history(&run.anchor_message_id).await?;
        // One more read only for a conversation whose replies made tool calls.
        let mut calls = if history.iter().any(|m| m.has_calls) {
            store.tool_calls_of_session(&run.session_id).await?
        } else {
            Default::default()
        };
        let (offered, missing) = self.turn_tools(&self.session.tools).await;
        let mut messages = Vec::with_capacity(history.len() + 1);
        if !missing.is_empty() {
            messages.push(ChatMessage::text("system", missing_sources_note(&missing)));
        }
        for m in history {
            match m.role {
                Role::Operator => messages.push(ChatMessage::text("user", m.content)),
                Role::Agent => match calls.remove(&m.id) {
                    Some(calls) => messages.extend(conversation_of(&m.content, &calls)),
                    None => messages.push(ChatMessage::text("assistant", m.content)),
                },
            }
        }
        Ok(Turn {
            model: self.session.model.clone(),
            messages,
            offered,
            spent: u64::try_from(self.session.tokens_used).unwrap_or(0),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_faster_than_it_is_read_goes_out_a_third_as_often() {
        let window = Duration::from_millis(33);
        assert_eq!(delta_gap(window, 0), window);
        assert_eq!(delta_gap(window, FAST_TEXT_BYTES), window);
        assert_eq!(
            delta_gap(window, FAST_TEXT_BYTES + 1),
            Duration::from_millis(99)
        );
        // No window, none held; a long window is not made longer than a second.
        assert_eq!(delta_gap(Duration::ZERO, 10_000), Duration::ZERO);
        assert_eq!(
            delta_gap(Duration::from_millis(500), 10_000),
            Duration::from_secs(1)
        );
        assert_eq!(
            delta_gap(Duration::from_secs(1), 10_000),
            Duration::from_secs(1)
        );
    }
}
