//! The tool side of an agent turn (CONTRACT §6): a reply's recorded steps turned back into
//! the conversation a provider reads, and each tool call a model step asks for executed and
//! recorded — its start before it is sent, its end before the next model step.
use super::RunTask;
use crate::approval::{self, Verdict};
use crate::clock::{new_id, now_ms};
use crate::llm::tool_calls::AssembledCall;
use crate::llm::{ChatMessage, ChatToolCall};
use crate::store::{NewToolCall, RecordedCall};
use crate::tools::builtin::{self, Caller};
use crate::tools::{bounded_result, model_name, CallEnd, Offered, BUILTIN};
use app::wire::{Approval, Event, ToolCall, ToolCallEvent, ToolCallId, ToolCallStatus};
use serde_json::{Map, Value};
use std::sync::Arc;
use std::time::Duration;

/// The longest call id a model may give (a longer or odd one is replaced).
const MAX_CALL_ID: usize = 128;

/// The longest a turn waits for its session's tool sources that are still starting (the
/// first seconds after the server starts) before it goes on without them.
pub const TOOLS_START_WAIT: Duration = Duration::from_secs(10);

/// What the model is told of a call whose outcome is unknown.
pub const OUTCOME_UNKNOWN: &str = "The outcome of this tool call is unknown: it was started but \
Mulligan stopped before its result came back. Check whether it took effect before doing it again.";

/// A reply's text and recorded calls as the provider conversation: for each step that asked
/// for tools, an assistant message with its text and calls followed by one `tool` message per
/// call; then the text after the last call.
pub fn conversation_of(content: &str, calls: &[RecordedCall]) -> Vec<ChatMessage> {
    let mut out = Vec::new();
    let mut at = 0usize;
    let mut i = 0;
    while i < calls.len() {
        let step = calls[i].call.step;
        let group: Vec<&RecordedCall> = calls[i..]
            .iter()
            .take_while(|c| c.call.step == step)
            .collect();
        i += group.len();
        let upto = text_boundary(content, group[0].text_offset.max(at));
        let mut asked = ChatMessage::text("assistant", &content[at..upto]);
        at = upto;
        asked.tool_calls = group
            .iter()
            .map(|c| {
                let name = if c.call.server.is_empty() {
                    c.call.tool.clone()
                } else {
                    model_name(&c.call.server, &c.call.tool)
                };
                let arguments = match &c.call.arguments {
                    Value::Object(_) => c.call.arguments.to_string(),
                    _ => "{}".to_string(),
                };
                ChatToolCall::new(&c.provider_id, &name, &arguments)
            })
            .collect();
        out.push(asked);
        for c in group {
            let mut answer = ChatMessage::text("tool", result_for_model(&c.call));
            answer.tool_call_id = Some(c.provider_id.clone());
            out.push(answer);
        }
    }
    if at < content.len() {
        out.push(ChatMessage::text("assistant", &content[at..]));
    }
    out
}

/// The largest char boundary of `content` not past `at`.
fn text_boundary(content: &str, at: usize) -> usize {
    let mut at = at.min(content.len());
    while !content.is_char_boundary(at) {
        at -= 1;
    }
    at
}

/// What the model reads as a call's result.
fn result_for_model(call: &ToolCall) -> String {
    match call.status {
        ToolCallStatus::Ok | ToolCallStatus::Error => call.result.clone().unwrap_or_default(),
        ToolCallStatus::Denied => call
            .result
            .clone()
            .unwrap_or_else(|| approval::declined_text(None, false)),
        // A call never sent says so in its result; one cut short, that the operator did.
        ToolCallStatus::Cancelled => call
            .result
            .clone()
            .unwrap_or_else(|| "The operator cancelled this tool call.".into()),
        ToolCallStatus::Running | ToolCallStatus::Interrupted => OUTCOME_UNKNOWN.into(),
        // Never sent (its run ended while it waited).
        ToolCallStatus::AwaitingApproval | ToolCallStatus::Queued => {
            "This tool call was not run: its turn ended before it was decided.".into()
        }
    }
}

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
    /// Calls wait for the operator's decision: the run parks (CONTRACT §8).
    Awaiting,
}

/// One call of a step, checked and about to be recorded.
struct Prepared {
    ord: u32,
    provider_id: String,
    call: ToolCall,
    found: Option<Offered>,
    arguments: Option<Map<String, Value>>,
    verdict: Verdict,
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
            return self.ask(prepared, text_offset).await;
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
            self.announce(&call);
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

    /// A call the model asked for, checked: its tool, its arguments, and what the approval
    /// policy says of it. One that cannot run (no such tool, arguments that are not an
    /// object, a tool the session always rejects) is answered at once and never sent.
    fn prepare(&self, a: AssembledCall, ord: u32, step: u32, offered: &[Offered]) -> Prepared {
        let found = offered.iter().find(|o| o.model_name == a.name).cloned();
        let arguments = parse_arguments(&a.arguments);
        let annotations = found.as_ref().map(Offered::annotations);
        let mut call = ToolCall {
            id: ToolCallId::new(new_id("tc")),
            step,
            server: found.as_ref().map(|o| o.server.clone()).unwrap_or_default(),
            tool: found
                .as_ref()
                .map_or_else(|| limited(&a.name, 128), |o| o.tool().to_string()),
            arguments: match &arguments {
                Ok(map) => Value::Object(map.clone()),
                Err(_) => Value::String(limited(&a.arguments, 4096)),
            },
            status: ToolCallStatus::Running,
            result: None,
            started_at: now_ms(),
            finished_at: None,
            approval: None,
            annotations: annotations.filter(|a| !a.is_empty()),
        };
        let refusal = match (&found, &arguments) {
            (None, _) => Some(format!(
                "There is no tool named {:?} in this session. Available: {}.",
                limited(&a.name, 128),
                offered.iter().map(|o| o.model_name.as_str()).collect::<Vec<_>>().join(", ")
            )),
            (_, Err(e)) => Some(format!("The arguments are not a JSON object: {e}. Call the tool again with valid JSON arguments.")),
            _ => None,
        };
        let verdict = match (&refusal, &found) {
            (None, Some(o)) => approval::verdict(
                self.session.approval,
                &self.session.tool_grants,
                &self.ctx.tools.rule(&o.server),
                &o.server,
                o.tool(),
                &o.annotations(),
            ),
            _ => Verdict::Run,
        };
        if let Some(text) = refusal {
            call.status = ToolCallStatus::Error;
            call.result = Some(text);
            call.finished_at = Some(now_ms());
        } else if verdict == Verdict::Deny {
            call.status = ToolCallStatus::Denied;
            call.result = Some(approval::declined_text(None, false));
            call.finished_at = Some(now_ms());
        }
        Prepared {
            ord,
            provider_id: a.id,
            call,
            found,
            arguments: arguments.ok(),
            verdict,
        }
    }

    /// Records a step's calls asking the operator (CONTRACT §8): nothing is sent; the run
    /// parks once they are recorded.
    async fn ask(&mut self, prepared: Vec<Prepared>, text_offset: usize) -> Executed {
        let asked_at = now_ms();
        let mut calls = Vec::with_capacity(prepared.len());
        for mut p in prepared {
            if p.call.status == ToolCallStatus::Running {
                p.call.status = match p.verdict {
                    Verdict::Ask => {
                        p.call.approval = Some(Approval {
                            asked_at,
                            decision: None,
                            reason: None,
                            decided_at: None,
                            by: None,
                            from: None,
                        });
                        ToolCallStatus::AwaitingApproval
                    }
                    _ => ToolCallStatus::Queued,
                };
            }
            calls.push(p);
        }
        let new: Vec<NewToolCall> = calls
            .iter()
            .map(|p| NewToolCall {
                run_id: &self.run.id,
                message_id: &self.reply.id,
                session_id: &self.run.session_id,
                ord: p.ord,
                provider_id: &p.provider_id,
                call: &p.call,
                text_offset,
            })
            .collect();
        self.active.live().tool_calls += u32::try_from(new.len()).unwrap_or(u32::MAX);
        if let Err(e) = self.ctx.store.record_calls(&new).await {
            return Executed::Unrecorded(format!("could not record the tool calls asked for: {e}"));
        }
        drop(new);
        for p in &calls {
            self.announce(&p.call);
        }
        let waiting = calls
            .iter()
            .filter(|p| p.call.status == ToolCallStatus::AwaitingApproval)
            .count();
        tracing::info!(waiting, "tool calls wait for the operator's decision");
        Executed::Awaiting
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
        self.announce(call);
        Ok(status != ToolCallStatus::Cancelled)
    }

    /// Executes the decided step of a resumed run (CONTRACT §8), in the calls' order: an
    /// allowed or queued call is sent (its start recorded first), a denied one keeps its
    /// refusal. Answers the run's calls as they are now.
    pub(super) async fn execute_decided(
        &mut self,
        mut recorded: Vec<RecordedCall>,
        offered: &[Offered],
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
            self.announce(call);
            let name = model_name(&call.server, &call.tool);
            let found = offered
                .iter()
                .find(|o| o.server == call.server && o.tool() == call.tool)
                .or_else(|| offered.iter().find(|o| o.model_name == name))
                .cloned();
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
                    self.announce(call);
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
    fn announce(&self, call: &ToolCall) {
        self.publish(Event::ToolCall(ToolCallEvent {
            run_id: self.run.id.clone(),
            message_id: self.reply.id.clone(),
            call: call.clone(),
        }));
    }
}

/// The model's argument text as a JSON object (empty text: no arguments).
fn parse_arguments(text: &str) -> Result<Map<String, Value>, String> {
    if text.trim().is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(format!("expected an object, got {}", kind_of(&other))),
        Err(e) => Err(e.to_string()),
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// At most `max` bytes of `s`, cut at a character boundary.
fn limited(s: &str, max: usize) -> String {
    s[..text_boundary(s, max)].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorded(step: u32, offset: usize, id: &str, status: ToolCallStatus) -> RecordedCall {
        RecordedCall {
            call: ToolCall {
                id: ToolCallId::new(format!("tc_{id}")),
                step,
                server: "fs".into(),
                tool: "write_file".into(),
                arguments: serde_json::json!({"path": "a"}),
                status,
                result: Some(format!("result {id}")),
                started_at: 1,
                finished_at: Some(2),
                approval: None,
                annotations: None,
            },
            message_id: app::wire::MessageId::new("m"),
            provider_id: format!("call_{id}"),
            text_offset: offset,
        }
    }

    #[test]
    fn a_reply_with_calls_becomes_steps_with_their_results() {
        let calls = [
            recorded(1, 6, "1", ToolCallStatus::Ok),
            recorded(1, 6, "2", ToolCallStatus::Interrupted),
            recorded(2, 11, "3", ToolCallStatus::Error),
        ];
        let msgs = conversation_of("First.Next.Done.", &calls);
        let roles: Vec<_> = msgs.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(
            roles,
            [
                "assistant",
                "tool",
                "tool",
                "assistant",
                "tool",
                "assistant"
            ]
        );
        assert_eq!(msgs[0].content, "First.");
        assert_eq!(msgs[0].tool_calls.len(), 2);
        assert_eq!(msgs[0].tool_calls[0].function.name, "fs__write_file");
        assert_eq!(msgs[1].content, "result 1");
        assert_eq!(
            msgs[2].content, OUTCOME_UNKNOWN,
            "an interrupted call's outcome is unknown"
        );
        assert_eq!(msgs[2].tool_call_id.as_deref(), Some("call_2"));
        assert_eq!(msgs[3].content, "Next.");
        assert_eq!(msgs[5].content, "Done.");
    }

    #[test]
    fn arguments_must_be_an_object() {
        assert!(parse_arguments("").unwrap().is_empty());
        assert_eq!(parse_arguments(r#"{"a":1}"#).unwrap()["a"], 1);
        assert!(parse_arguments("[1]").unwrap_err().contains("array"));
        assert!(parse_arguments("{nope").is_err());
        assert_eq!(limited("héllo", 2), "h");
    }
}
