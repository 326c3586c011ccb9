//! CONTRACT §6 wire types: the parts of an agent's reply, its tool calls, and the tool
//! sources a session can use.
use super::text::words;
use super::{MessageId, Millis, RunId, SessionId, ToolCallId};
use serde::{Deserialize, Serialize};

/// The built-in tool source's name (CONTRACT §5): Mulligan's own tools, the tools a session
/// has when it names none.
pub const BUILTIN_SOURCE: &str = "mulligan";

/// One part of an agent message, in the order it happened.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
// A reply holds a few parts, read far more than moved: boxing the call would cost an
// allocation per part for no gain.
#[allow(clippy::large_enum_variant)]
pub enum Part {
    Text { text: String },
    ToolCall { call: ToolCall },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum ToolCallStatus {
    Running,
    Ok,
    Error,
    Cancelled,
    /// Started, with no recorded result: its outcome is unknown.
    Interrupted,
    /// Recorded, not sent: it waits for the operator's decision (CONTRACT §8).
    AwaitingApproval,
    /// The operator declined it (or its wait timed out): never sent.
    Denied,
    /// Recorded, not sent, needing no decision: it waits for the other calls of its step
    /// to be decided, then runs in its order.
    Queued,
}

impl ToolCallStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ToolCallStatus::Running => "running",
            ToolCallStatus::Ok => "ok",
            ToolCallStatus::Error => "error",
            ToolCallStatus::Cancelled => "cancelled",
            ToolCallStatus::Interrupted => "interrupted",
            ToolCallStatus::AwaitingApproval => "awaiting_approval",
            ToolCallStatus::Denied => "denied",
            ToolCallStatus::Queued => "queued",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "running" => ToolCallStatus::Running,
            "ok" => ToolCallStatus::Ok,
            "error" => ToolCallStatus::Error,
            "cancelled" => ToolCallStatus::Cancelled,
            "interrupted" => ToolCallStatus::Interrupted,
            "awaiting_approval" => ToolCallStatus::AwaitingApproval,
            "denied" => ToolCallStatus::Denied,
            "queued" => ToolCallStatus::Queued,
            _ => return None,
        })
    }
}

/// A tool call the model asked for, and what became of it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct ToolCall {
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub id: ToolCallId,
    /// The model step (from 1) that asked for it.
    pub step: u32,
    pub server: String,
    pub tool: String,
    pub arguments: serde_json::Value,
    pub status: ToolCallStatus,
    /// The tool's text output (at most [`MAX_TOOL_RESULT_BYTES`], truncated with a note).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    #[cfg_attr(feature = "openapi", schema(value_type = i64))]
    pub started_at: Millis,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<i64>))]
    pub finished_at: Option<Millis>,
    /// The operator's question and answer, when the call asked (CONTRACT §8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<Approval>,
    /// What the tool's source says of it (MCP annotations), as the call was asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<ToolAnnotations>,
}

impl ToolCall {
    /// Waiting for a decision: asked, not yet decided.
    pub fn is_waiting(&self) -> bool {
        self.status == ToolCallStatus::AwaitingApproval
            && self.approval.as_ref().is_some_and(|a| a.decision.is_none())
    }
}

/// What a tool's source says of it (MCP `ToolAnnotations`: hints, not guarantees).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct ToolAnnotations {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destructive: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotent: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_world: Option<bool>,
}

impl ToolAnnotations {
    /// None set: nothing said.
    pub fn is_empty(&self) -> bool {
        *self == ToolAnnotations::default()
    }
}

words! {
    /// The operator's answer to a waiting call (CONTRACT §8).
    #[derive(Serialize, Deserialize)]
    #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
    #[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
    #[serde(rename_all = "snake_case")]
    closed enum Decision {
        AllowOnce = "allow_once",
        /// Allow, and allow this tool of this source in this session from now on.
        AllowAlways = "allow_always",
        RejectOnce = "reject_once",
        /// Reject, and reject this tool of this source in this session from now on.
        RejectAlways = "reject_always",
        /// Nobody decided within `MULLIGAN_APPROVAL_TIMEOUT_MS`: a rejection.
        TimedOut = "timed_out",
    }
}

impl Decision {
    /// Whether the call runs.
    pub fn allows(self) -> bool {
        matches!(self, Decision::AllowOnce | Decision::AllowAlways)
    }
}

words! {
    /// Where a decision came from.
    #[derive(Serialize, Deserialize)]
    #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
    #[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
    #[serde(rename_all = "snake_case")]
    closed enum DecidedBy {
        Page = "page",
        Cli = "cli",
        Api = "api",
        Mcp = "mcp",
    }
}

/// A call's question to the operator and its answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct Approval {
    #[cfg_attr(feature = "openapi", schema(value_type = i64))]
    pub asked_at: Millis,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<Decision>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<i64>))]
    pub decided_at: Option<Millis>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<DecidedBy>,
    /// The tab that decided (a page's decision).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
}

impl Approval {
    /// A question asked at `asked_at`, not decided yet.
    pub fn asked(asked_at: Millis) -> Approval {
        Approval {
            asked_at,
            decision: None,
            reason: None,
            decided_at: None,
            by: None,
            from: None,
        }
    }
}

/// The longest reason a decision may carry, in characters.
pub const MAX_DECISION_REASON_CHARS: usize = 2000;

/// `POST /runs/:rid/tool_calls/:cid/decision`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct DecideToolCall {
    /// `allow_once`, `allow_always`, `reject_once` or `reject_always`.
    pub decision: Decision,
    /// Told to the model with a rejection (at most 2,000 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The deciding tab's id (`tab-…`), from the page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// Where the decision comes from; `api` when not said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<DecidedBy>,
}

/// The decision's answer: the call as decided.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct DecidedCall {
    pub call: ToolCall,
}

/// One call waiting for the operator.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct WaitingCall {
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub session_id: SessionId,
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub run_id: RunId,
    pub call: ToolCall,
    #[cfg_attr(feature = "openapi", schema(value_type = i64))]
    pub waiting_since: Millis,
}

/// `GET /approvals[?limit=&before=]`: the calls waiting, oldest first, a page at a time
/// (100 by default, as `GET /sessions`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct Approvals {
    pub approvals: Vec<WaitingCall>,
    /// When more calls wait after this page: the `before` that asks for the next one (the
    /// page's last call id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub next_before: Option<ToolCallId>,
}

/// A tool result longer than this is truncated, with a note saying so.
pub const MAX_TOOL_RESULT_BYTES: usize = 16 * 1024;

/// SSE `tool_call`: a call started or ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct ToolCallEvent {
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub run_id: RunId,
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub message_id: MessageId,
    pub call: ToolCall,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum ToolTransport {
    Stdio,
    Http,
    Builtin,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum ToolServerStatus {
    Ready,
    Starting,
    Failed,
}

/// One tool a server offers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct ToolInfo {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub input_schema: serde_json::Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destructive: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotent: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_world: Option<bool>,
}

impl ToolInfo {
    /// Its annotations as a call carries them.
    pub fn annotations(&self) -> ToolAnnotations {
        ToolAnnotations {
            read_only: self.read_only,
            destructive: self.destructive,
            idempotent: self.idempotent,
            open_world: self.open_world,
        }
    }
}

/// One tool source: a configured MCP server or the built-in `mulligan`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct ToolServer {
    pub name: String,
    pub transport: ToolTransport,
    pub status: ToolServerStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub tools: Vec<ToolInfo>,
}

/// `GET /tools` answers this.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct ToolsResponse {
    pub servers: Vec<ToolServer>,
}

/// Splits an agent's text at the tool calls it made: `offsets[i]` is how many bytes of
/// `content` came before call `i` (calls in the order they were asked for). Offsets past the
/// text or inside a character are clamped, so a damaged row still renders.
pub fn parts_of(content: &str, calls: &[(usize, ToolCall)]) -> Vec<Part> {
    let mut parts = Vec::with_capacity(calls.len() * 2 + 1);
    let mut at = 0;
    for (offset, call) in calls {
        let mut end = (*offset).clamp(at, content.len());
        while !content.is_char_boundary(end) {
            end -= 1;
        }
        let end = end.max(at);
        if end > at {
            parts.push(Part::Text {
                text: content[at..end].to_string(),
            });
        }
        at = end;
        parts.push(Part::ToolCall { call: call.clone() });
    }
    if at < content.len() {
        parts.push(Part::Text {
            text: content[at..].to_string(),
        });
    }
    parts
}

impl super::Message {
    /// Applies a `tool_call` event: a call seen again replaces its part; a new call follows
    /// the text streamed since the last part.
    pub fn apply_tool_call(&mut self, call: ToolCall) {
        let parts = self.parts.get_or_insert_with(Vec::new);
        for p in parts.iter_mut() {
            if let Part::ToolCall { call: c } = p {
                if c.id == call.id {
                    *c = call;
                    return;
                }
            }
        }
        let shown = text_len(parts);
        if let Some(text) = self.content.get(shown..).filter(|t| !t.is_empty()) {
            parts.push(Part::Text {
                text: text.to_string(),
            });
        }
        parts.push(Part::ToolCall { call });
    }

    /// The text after the last part (streamed since the last tool call); all of `content`
    /// when there are no parts.
    pub fn text_after_parts(&self) -> &str {
        let shown = self.parts.as_deref().map_or(0, text_len);
        self.content.get(shown..).unwrap_or_default()
    }
}

/// The bytes of text the parts hold.
fn text_len(parts: &[Part]) -> usize {
    parts
        .iter()
        .map(|p| match p {
            Part::Text { text } => text.len(),
            Part::ToolCall { .. } => 0,
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(id: &str) -> ToolCall {
        ToolCall {
            id: ToolCallId::new(id),
            step: 1,
            server: "fs".into(),
            tool: "write_file".into(),
            arguments: serde_json::json!({"path": "a"}),
            status: ToolCallStatus::Ok,
            result: Some("done".into()),
            started_at: 1,
            finished_at: Some(2),
            approval: None,
            annotations: None,
        }
    }

    #[test]
    fn parts_are_tagged_by_type() {
        let json = serde_json::to_value(Part::ToolCall { call: call("c1") }).unwrap();
        assert_eq!(json["type"], "tool_call");
        assert_eq!(json["call"]["status"], "ok");
        let json = serde_json::to_value(Part::Text { text: "hi".into() }).unwrap();
        assert_eq!(json, serde_json::json!({"type": "text", "text": "hi"}));
    }

    #[test]
    fn text_is_split_at_each_call() {
        let parts = parts_of("I will write.Done.", &[(13, call("c1"))]);
        assert_eq!(parts.len(), 3);
        assert_eq!(
            parts[0],
            Part::Text {
                text: "I will write.".into()
            }
        );
        assert!(matches!(&parts[1], Part::ToolCall { call } if call.id.as_str() == "c1"));
        assert_eq!(
            parts[2],
            Part::Text {
                text: "Done.".into()
            }
        );
    }

    #[test]
    fn damaged_offsets_are_clamped_not_panicked_on() {
        // Past the end, inside a character, and going backwards.
        let parts = parts_of("héllo", &[(2, call("a")), (99, call("b")), (1, call("c"))]);
        let texts: Vec<_> = parts
            .iter()
            .filter_map(|p| match p {
                Part::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(texts.concat(), "héllo");
        assert_eq!(parts.len(), 5);
    }
}
