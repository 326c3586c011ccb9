//! A reply's recorded steps turned back into the conversation a provider reads: each step
//! that asked for tools as an assistant message with its calls, then one `tool` message per
//! call with what the model is told of its outcome.
use crate::approval;
use crate::llm::{ChatMessage, ChatToolCall};
use crate::store::RecordedCall;
use crate::tools::model_name;
use app::wire::{ToolCall, ToolCallStatus};
use serde_json::Value;

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
pub(super) fn text_boundary(content: &str, at: usize) -> usize {
    let mut at = at.min(content.len());
    while !content.is_char_boundary(at) {
        at -= 1;
    }
    at
}

/// What the model reads as a call's result.
pub(super) fn result_for_model(call: &ToolCall) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;
    use app::wire::ToolCallId;

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
}
