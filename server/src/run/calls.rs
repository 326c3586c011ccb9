//! The tool side of an agent turn (CONTRACT §6): each tool call a model step asks for
//! executed and recorded — its start before it is sent, its end before the next model step —
//! or asked of the operator first (CONTRACT §8).
use super::conversation::result_for_model;
use super::prepare::{Prepared, MAX_CALL_ID};
use super::RunTask;
use crate::approval::Verdict;
use crate::clock::now_ms;
use crate::llm::tool_calls::AssembledCall;
use crate::llm::{ChatMessage, ChatToolCall};
use crate::store::{AskedCall, NewToolCall, RecordedCall};
use crate::tools::builtin::{self, Caller};
use crate::tools::{bounded_result, model_name, CallEnd, Offered, BUILTIN};
use app::wire::{Approval, Event, ToolCall, ToolCallEvent, ToolCallStatus};
use serde_json::{Map, Value};
use std::sync::Arc;
use std::time::Duration;

/// The longest a turn waits for its session's tool sources that are still starting (the
/// first seconds after the server starts) before it goes on without them.
pub const TOOLS_START_WAIT: Duration = Duration::from_secs(10);

/// What one model step asked for: its text and its tool calls.
pub struct Asked {
    pub step: u32,
    pub text: String,
    pub calls: Vec<AssembledCall>,
}

/// How executing one step's calls ended.
pub enum Executed {
    /// Every call has a recorded result: the conversation goes on with these messages.
    Done(Vec<ChatMessage>),
    /// The run was cancelled during a call.
    Cancelled,
    /// A call's start or end could not be recorded: the turn cannot go on safely.
    Unrecorded(String),
    /// Calls wait for the operator's decision: the run parks with these, recorded as it
    /// parks (CONTRACT §8).
    Awaiting(Vec<AskedCall>),
}

/// The first step's note to the model when tool sources were still starting.
pub fn missing_sources_note(missing: &[String]) -> String {
    format!(
        "The tool sources {} were still starting when this turn began: their tools are not \
         available in this turn. Tell the operator if the task needs them.",
        missing
            .iter()
            .map(|m| format!("\"{m}\""))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

impl RunTask {
    /// The tools a turn offers: its session's sources, once those still starting are up
    /// (waiting at most [`TOOLS_START_WAIT`], the run `running` meanwhile, and logged).
    /// Answers the tools and the sources still missing after the wait.
    pub(super) async fn turn_tools(&self, sources: &[String]) -> (Arc<[Offered]>, Vec<String>) {
        let tools = &self.ctx.tools;
        let starting = tools.external().starting(sources);
        let missing = if starting.is_empty() {
            starting
        } else {
            tracing::info!(
                sources = ?starting,
                "the turn waits up to {} s for tool sources still starting",
                TOOLS_START_WAIT.as_secs()
            );
            let missing = tools.started(sources, TOOLS_START_WAIT).await;
            if !missing.is_empty() {
                tracing::warn!(
                    sources = ?missing,
                    "tool sources still starting after {} s: the turn goes on without their tools",
                    TOOLS_START_WAIT.as_secs()
                );
            }
            missing
        };
        (tools.offered(sources), missing)
    }

    /// Executes one step's calls in order and records each; answers the assistant message
    /// that asked for them and their results, as the next step's conversation needs them.
    /// When one of them needs the operator's decision (CONTRACT §8), none is sent: all are
    /// recorded (the asking ones `awaiting_approval`, the others `queued`) and the run parks.
    pub(super) async fn execute_calls(&mut self, asked: Asked, offered: &[Offered]) -> Executed {
        let Asked { step, text, calls } = asked;
        // The operator's brake works mid-turn (CONTRACT §8): the mode and the remembered
        // decisions as they are now, not as the turn began. Unreadable, nothing runs.
        match self.ctx.store.approval_settings(&self.run.session_id).await {
            Ok((mode, grants)) => {
                self.session.approval = mode;
                self.session.tool_grants = grants;
            }
            Err(e) => {
                return Executed::Unrecorded(format!(
                    "could not read the session's approval settings: {e}"
                ))
            }
        }
        let mut assistant = ChatMessage::text("assistant", text);
        let mut prepared = Vec::with_capacity(calls.len());
        for mut a in calls {
            self.tally.calls = self.tally.calls.saturating_add(1);
            let ord = self.tally.calls;
            // The model's id for the call goes back with its result: a sane one, or ours.
            if a.id.is_empty()
                || a.id.len() > MAX_CALL_ID
                || !a.id.chars().all(|c| c.is_ascii_graphic())
            {
                a.id = format!("call_{step}_{ord}");
            }
            assistant
                .tool_calls
                .push(ChatToolCall::new(&a.id, &a.name, &a.arguments));
            prepared.push(self.prepare(a, ord, step, offered));
        }
        let text_offset = self.active.live().text.len();
        if prepared.iter().any(|p| p.verdict == Verdict::Ask) {
            return self.ask(prepared, text_offset);
        }
        let mut results = Vec::with_capacity(prepared.len());
        for Prepared {
            ord,
            provider_id,
            mut call,
            found,
            arguments,
            verdict,
        } in prepared
        {
            let new = NewToolCall {
                run_id: &self.run.id,
                message_id: &self.reply.id,
                session_id: &self.run.session_id,
                ord,
                provider_id: &provider_id,
                call: &call,
                text_offset,
            };
            self.active.live().tool_calls += 1; // before: a failed write may still have landed
            if let Err(e) = self.ctx.store.tool_call_started(&new).await {
                return Executed::Unrecorded(format!("could not record a tool call's start: {e}"));
            }
            self.announce_call(&call);
            if call.status == ToolCallStatus::Running && verdict == Verdict::Run {
                let (Some(o), Some(map)) = (found.as_ref(), arguments) else {
                    unreachable!("executable calls have a tool and arguments")
                };
                match self.send_recorded(&mut call, o, map).await {
                    Ok(true) => {}
                    Ok(false) => return Executed::Cancelled,
                    Err(e) => return e,
                }
            }
            let mut answer = ChatMessage::text("tool", result_for_model(&call));
            answer.tool_call_id = Some(provider_id);
            results.push(answer);
        }
        let mut messages = Vec::with_capacity(results.len() + 1);
        messages.push(assistant);
        messages.extend(results);
        Executed::Done(messages)
    }

    /// A step's calls asking the operator (CONTRACT §8): nothing is sent; they are recorded
    /// with the run's park, in one transaction.
    fn ask(&mut self, prepared: Vec<Prepared>, text_offset: usize) -> Executed {
        let asked_at = now_ms();
        let mut calls = Vec::with_capacity(prepared.len());
        for mut p in prepared {
            if p.call.status == ToolCallStatus::Running {
                p.call.status = match p.verdict {
                    Verdict::Ask => {
                        p.call.approval = Some(Approval::asked(asked_at));
                        ToolCallStatus::AwaitingApproval
                    }
                    _ => ToolCallStatus::Queued,
                };
            }
            calls.push(p);
        }
        self.active.live().tool_calls += u32::try_from(calls.len()).unwrap_or(u32::MAX);
        let waiting = calls
            .iter()
            .filter(|p| p.call.status == ToolCallStatus::AwaitingApproval)
            .count();
        tracing::info!(waiting, "tool calls wait for the operator's decision");
        Executed::Awaiting(
            calls
                .into_iter()
                .map(|p| AskedCall {
                    ord: p.ord,
                    provider_id: p.provider_id,
                    call: p.call,
                    text_offset,
                })
                .collect(),
        )
    }

    /// Sends a recorded call and records its end: `Ok(true)` to go on, `Ok(false)` when the
    /// run was cancelled during it.
    async fn send_recorded(
        &mut self,
        call: &mut ToolCall,
        o: &Offered,
        arguments: Map<String, Value>,
    ) -> Result<bool, Executed> {
        let (status, text, not_sent) = self.call_tool(o, arguments).await;
        call.status = status;
        call.result = text.map(|t| bounded_result(&t));
        call.finished_at = Some(now_ms());
        let ended = self.ctx.store.tool_call_ended(call, &self.run.id, not_sent);
        if let Err(e) = ended.await {
            return Err(Executed::Unrecorded(format!(
                "could not record a tool call's end: {e}"
            )));
        }
        self.announce_call(call);
        Ok(status != ToolCallStatus::Cancelled)
    }

    /// Executes the decided step of a resumed run (CONTRACT §8), in the calls' order: an
    /// allowed or queued call is sent (its start recorded first), a denied one keeps its
    /// refusal. Answers the run's calls as they are now.
    pub(super) async fn execute_decided(
        &mut self,
        mut recorded: Vec<RecordedCall>,
    ) -> Result<Vec<RecordedCall>, Executed> {
        let last = recorded.iter().map(|c| c.call.step).max().unwrap_or(0);
        for c in recorded.iter_mut().filter(|c| c.call.step == last) {
            let call = &mut c.call;
            let send = match call.status {
                ToolCallStatus::Queued => true,
                ToolCallStatus::AwaitingApproval => call
                    .approval
                    .as_ref()
                    .and_then(|a| a.decision)
                    .is_some_and(|d| d.allows()),
                _ => false,
            };
            if !send {
                continue;
            }
            match self
                .ctx
                .store
                .decided_call_sent(&self.run.id, &call.id)
                .await
            {
                Ok(at) => {
                    call.status = ToolCallStatus::Running;
                    call.started_at = at;
                }
                Err(e) => {
                    return Err(Executed::Unrecorded(format!(
                        "could not record a tool call's start: {e}"
                    )))
                }
            }
            self.announce_call(call);
            // The server and tool it was recorded (and decided) with, never another found
            // again by its sanitized name: names can collide after the 64-character cut,
            // and a source chosen since may shadow it in the model's list.
            let name = model_name(&call.server, &call.tool);
            let found = self
                .ctx
                .tools
                .recorded(&self.session.tools, &call.server, &call.tool);
            let arguments = match &call.arguments {
                Value::Object(map) => map.clone(),
                _ => Map::new(),
            };
            match found {
                Some(o) => match self.send_recorded(call, &o, arguments).await {
                    Ok(true) => {}
                    Ok(false) => return Err(Executed::Cancelled),
                    Err(e) => return Err(e),
                },
                None => {
                    call.status = ToolCallStatus::Error;
                    call.result = Some(format!(
                        "The tool {name} is no longer available in this session (its source \
                         is not ready or not chosen), so the call was not sent."
                    ));
                    call.finished_at = Some(now_ms());
                    let ended = self.ctx.store.tool_call_ended(call, &self.run.id, true);
                    if let Err(e) = ended.await {
                        return Err(Executed::Unrecorded(format!(
                            "could not record a tool call's end: {e}"
                        )));
                    }
                    self.announce_call(call);
                }
            }
        }
        Ok(recorded)
    }

    /// Sends one call to its source: its status, its text, and whether it was never sent.
    async fn call_tool(
        &self,
        o: &Offered,
        arguments: Map<String, Value>,
    ) -> (ToolCallStatus, Option<String>, bool) {
        let timeout = self.ctx.cfg.tool_timeout;
        if o.server == BUILTIN {
            // The session's own authority: it acts on its descendants only.
            let caller = Caller::Agent(self.run.session_id.clone());
            let call = self
                .builtins
                .call(&caller, o.tool(), Value::Object(arguments));
            return tokio::select! {
                _ = self.active.cancel.cancelled() => (ToolCallStatus::Cancelled, None, false),
                answer = tokio::time::timeout(timeout, call) => match answer {
                    Ok(Ok(value)) => (ToolCallStatus::Ok, Some(value.to_string()), false),
                    Ok(Err(e)) => (ToolCallStatus::Error, Some(builtin::refusal_json(&e).to_string()), false),
                    Err(_) => (ToolCallStatus::Error, Some(format!("the tool took longer than its limit of {} s (MULLIGAN_TOOL_TIMEOUT_MS)", timeout.as_secs_f64())), false),
                },
            };
        }
        // On a task of its own: when the run is cancelled, this future is dropped with the
        // run's, and the call still sees the cancel and sends MCP `notifications/cancelled`.
        let (servers, cancel) = (
            self.ctx.tools.external().clone(),
            self.active.cancel.clone(),
        );
        let (server, tool) = (o.server.clone(), o.tool().to_string());
        let call = tokio::spawn(async move {
            servers
                .call(&server, &tool, arguments, timeout, &cancel)
                .await
        });
        let end = call.await.unwrap_or_else(|e| CallEnd::Lost {
            text: format!("the call failed inside Mulligan ({e})"),
        });
        match end {
            CallEnd::Done { text, is_error } => (
                if is_error { ToolCallStatus::Error } else { ToolCallStatus::Ok },
                Some(text),
                false,
            ),
            CallEnd::NotSent { text } => (ToolCallStatus::Error, Some(text), true),
            CallEnd::Lost { text } => (
                ToolCallStatus::Error,
                Some(format!("{text}. The call was sent but no result came back: it may or may not have taken effect; check before calling it again.")),
                false,
            ),
            CallEnd::Cancelled => (ToolCallStatus::Cancelled, None, false),
        }
    }

    /// Announces a call's start or end to the session's subscribers.
    pub(super) fn announce_call(&self, call: &ToolCall) {
        self.publish(Event::ToolCall(ToolCallEvent {
            run_id: self.run.id.clone(),
            message_id: self.reply.id.clone(),
            call: call.clone(),
        }));
    }
}
