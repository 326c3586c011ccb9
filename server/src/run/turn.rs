//! A run's step loop: streams each model step (relayed as `relay.rs` says) and executes the
//! tools a step asks for before the next one.
use super::calls::{missing_sources_note, Asked, Executed};
use super::conversation::conversation_of;
use super::relay::Step;
use super::{End, RunTask};
use crate::llm::limits;
use crate::llm::{ChatMessage, ChatRequest};
use app::wire::{RetryClass, Role};

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
            let recorded = match self.execute_decided(recorded).await {
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

    /// Opens one model step through Tier 1 and relays its deltas ([`Self::relay`]).
    async fn relay_step(&mut self, request: ChatRequest, step: u32) -> Step {
        let opened = match self.open(request, step).await {
            Ok(o) => o,
            Err(e) => return Step::Ended(End::Failed(e)),
        };
        self.active.live().steps = step;
        let idle = self.ctx.cfg.stream_idle;
        self.relay(opened.stream, opened.head, step, idle).await
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
