//! The tool side of an agent turn (CONTRACT §6): a reply's recorded steps turned back into
//! the conversation a provider reads, and each tool call a model step asks for executed and
//! recorded — its start before it is sent, its end before the next model step.
use super::RunTask;
use crate::clock::{new_id, now_ms};
use crate::llm::tool_calls::AssembledCall;
use crate::llm::{ChatMessage, ChatToolCall};
use crate::store::{NewToolCall, RecordedCall};
use crate::tools::builtin::{self, Caller};
use crate::tools::{bounded_result, model_name, CallEnd, Offered, BUILTIN};
use app::wire::{Event, ToolCall, ToolCallEvent, ToolCallStatus};
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
        ToolCallStatus::Cancelled => "The operator cancelled this tool call.".into(),
        ToolCallStatus::Running | ToolCallStatus::Interrupted => OUTCOME_UNKNOWN.into(),
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
        let (tools, run) = (&self.ctx.tools, &self.run);
        let starting = tools.external().starting(sources);
        let missing = if starting.is_empty() {
            starting
        } else {
            tracing::info!(
                run = %run.id, sources = ?starting,
                "the turn waits up to {} s for tool sources still starting",
                TOOLS_START_WAIT.as_secs()
            );
            let missing = tools.started(sources, TOOLS_START_WAIT).await;
            if !missing.is_empty() {
                tracing::warn!(
                    run = %run.id, sources = ?missing,
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
    pub(super) async fn execute_calls(&mut self, asked: Asked, offered: &[Offered]) -> Executed {
        let Asked { step, text, calls } = asked;
        let mut assistant = ChatMessage::text("assistant", text);
        let mut results = Vec::with_capacity(calls.len());
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
            let found = offered.iter().find(|o| o.model_name == a.name);
            let arguments = parse_arguments(&a.arguments);
            let mut call = ToolCall {
                id: new_id("tc").into(),
                step,
                server: found.map(|o| o.server.clone()).unwrap_or_default(),
                tool: found.map_or_else(|| limited(&a.name, 128), |o| o.tool().to_string()),
                arguments: match &arguments {
                    Ok(map) => Value::Object(map.clone()),
                    Err(_) => Value::String(limited(&a.arguments, 4096)),
                },
                status: ToolCallStatus::Running,
                result: None,
                started_at: now_ms(),
                finished_at: None,
            };
            // Not executable: answered at once, never sent.
            let refusal = match (found, &arguments) {
                (None, _) => Some(format!(
                    "There is no tool named {:?} in this session. Available: {}.",
                    limited(&a.name, 128),
                    offered.iter().map(|o| o.model_name.as_str()).collect::<Vec<_>>().join(", ")
                )),
                (_, Err(e)) => Some(format!("The arguments are not a JSON object: {e}. Call the tool again with valid JSON arguments.")),
                _ => None,
            };
            if let Some(text) = &refusal {
                call.status = ToolCallStatus::Error;
                call.result = Some(text.clone());
                call.finished_at = Some(now_ms());
            }
            let text_offset = self.active.live().text.len();
            let new = NewToolCall {
                run_id: &self.run.id,
                message_id: &self.reply.id,
                session_id: &self.run.session_id,
                ord,
                provider_id: &a.id,
                call: &call,
                text_offset,
            };
            self.active.live().tool_calls += 1; // before: a failed write may still have landed
            if let Err(e) = self.ctx.store.tool_call_started(&new).await {
                return Executed::Unrecorded(format!("could not record a tool call's start: {e}"));
            }
            self.announce(&call);
            if refusal.is_none() {
                let (Some(o), Ok(map)) = (found, arguments) else {
                    unreachable!("executable calls have a tool and arguments")
                };
                let (status, text, not_sent) = self.call_tool(o, map).await;
                call.status = status;
                call.result = text.map(|t| bounded_result(&t));
                call.finished_at = Some(now_ms());
                let ended = self
                    .ctx
                    .store
                    .tool_call_ended(&call, &self.run.id, not_sent);
                if let Err(e) = ended.await {
                    return Executed::Unrecorded(format!(
                        "could not record a tool call's end: {e}"
                    ));
                }
                self.announce(&call);
                if status == ToolCallStatus::Cancelled {
                    return Executed::Cancelled;
                }
            }
            let mut answer = ChatMessage::text("tool", result_for_model(&call));
            answer.tool_call_id = Some(a.id.clone());
            results.push(answer);
        }
        let mut messages = Vec::with_capacity(results.len() + 1);
        messages.push(assistant);
        messages.extend(results);
        Executed::Done(messages)
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
                id: format!("tc_{id}").into(),
                step,
                server: "fs".into(),
                tool: "write_file".into(),
                arguments: serde_json::json!({"path": "a"}),
                status,
                result: Some(format!("result {id}")),
                started_at: 1,
                finished_at: Some(2),
            },
            message_id: "m".into(),
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
