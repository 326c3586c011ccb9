//! What ACP's messages mean to a turn, and back: a `session/update` as the turn's item, a
//! permission request as the operator's question, a verdict as the agent's option. Pure.
use super::TurnItem;
use crate::llm::AgentCall;
use agent_client_protocol::v1::schema::{
    ContentBlock, PermissionOptionKind, RequestPermissionOutcome, RequestPermissionRequest,
    RequestPermissionResponse, SelectedPermissionOutcome, SessionUpdate, ToolCallContent,
    ToolCallStatus,
};
use app::wire::Decision;
use std::fmt::Write as _;

/// A session update as the running turn's item.
pub(super) fn item_of(update: SessionUpdate) -> TurnItem {
    match update {
        SessionUpdate::AgentMessageChunk(chunk) => match chunk.content {
            ContentBlock::Text(t) => TurnItem::Text(t.text),
            _ => TurnItem::Heard,
        },
        SessionUpdate::AgentThoughtChunk(_) => TurnItem::Thought,
        SessionUpdate::UsageUpdate(u) => TurnItem::Usage(u.used),
        SessionUpdate::ToolCall(c) => TurnItem::Call(AgentCall {
            id: c.tool_call_id.0.to_string(),
            title: Some(c.title),
            input: c.raw_input,
            ended_ok: ended(Some(c.status)),
            output: output(Some(&c.content), c.raw_output.as_ref()),
        }),
        SessionUpdate::ToolCallUpdate(u) => TurnItem::Call(AgentCall {
            id: u.tool_call_id.0.to_string(),
            output: output(u.fields.content.as_ref(), u.fields.raw_output.as_ref()),
            title: u.fields.title,
            input: u.fields.raw_input,
            ended_ok: ended(u.fields.status),
        }),
        _ => TurnItem::Heard,
    }
}

/// An agent's JSON-RPC error as the run's error text: its message, and what its `data` says
/// when that is more (Codex answers "Internal error" and says what happened in
/// `data.message`; Claude Code sends no `data`).
pub(super) fn error_text(message: &str, data: Option<&serde_json::Value>) -> String {
    let detail = match data {
        Some(serde_json::Value::String(s)) => Some(s.as_str()),
        Some(d) => d.get("message").and_then(|m| m.as_str()),
        None => None,
    };
    match detail {
        Some(d) if !d.is_empty() && d != message => format!("{message}: {d}"),
        _ => message.to_string(),
    }
}

/// Whether a tool call's status says it ended, and how.
fn ended(status: Option<ToolCallStatus>) -> Option<bool> {
    match status? {
        ToolCallStatus::Completed => Some(true),
        ToolCallStatus::Failed => Some(false),
        _ => None,
    }
}

/// A tool call's output as text: its text content, a diff's path, else its raw output.
fn output(
    content: Option<&Vec<ToolCallContent>>,
    raw: Option<&serde_json::Value>,
) -> Option<String> {
    let mut text = String::new();
    for c in content.into_iter().flatten() {
        match c {
            ToolCallContent::Content(c) => {
                if let ContentBlock::Text(t) = &c.content {
                    text.push_str(&t.text);
                    text.push('\n');
                }
            }
            ToolCallContent::Diff(d) => {
                let _ = writeln!(text, "edited {}", d.path.display());
            }
            _ => {}
        }
        if text.len() > app::wire::MAX_TOOL_RESULT_BYTES {
            break;
        }
    }
    if text.is_empty() {
        text = match raw? {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
    }
    let text = text.trim_end();
    (!text.is_empty()).then(|| text.to_string())
}

/// The call the agent asks about, as the run records it (what the request leaves unset
/// did not change).
pub(super) fn ask_of(req: &RequestPermissionRequest) -> AgentCall {
    let call = &req.tool_call;
    AgentCall {
        id: call.tool_call_id.0.to_string(),
        title: call.fields.title.clone(),
        input: call.fields.raw_input.clone(),
        ended_ok: None,
        output: None,
    }
}

/// The agent's option of the decision's kind (an `always` decision takes a `once` option
/// when the agent offers no `always` one, and back; a timeout rejects once); no decision:
/// the request is cancelled.
pub(super) fn answer(
    req: &RequestPermissionRequest,
    decision: Option<Decision>,
) -> RequestPermissionResponse {
    let kinds: &[PermissionOptionKind] = match decision {
        Some(Decision::AllowOnce) => &[
            PermissionOptionKind::AllowOnce,
            PermissionOptionKind::AllowAlways,
        ],
        Some(Decision::AllowAlways) => &[
            PermissionOptionKind::AllowAlways,
            PermissionOptionKind::AllowOnce,
        ],
        Some(Decision::RejectOnce | Decision::TimedOut) => &[
            PermissionOptionKind::RejectOnce,
            PermissionOptionKind::RejectAlways,
        ],
        Some(Decision::RejectAlways) => &[
            PermissionOptionKind::RejectAlways,
            PermissionOptionKind::RejectOnce,
        ],
        None => &[],
    };
    let chosen = kinds
        .iter()
        .find_map(|k| req.options.iter().find(|o| o.kind == *k))
        .map(|o| o.option_id.clone());
    RequestPermissionResponse::new(match chosen {
        Some(id) => RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(id)),
        None => RequestPermissionOutcome::Cancelled,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_error_says_what_its_data_adds() {
        use super::error_text;
        let codex = serde_json::json!({"message": "unexpected status 503 Service Unavailable", "codex_error_info": "other"});
        assert_eq!(
            error_text("Internal error", Some(&codex)),
            "Internal error: unexpected status 503 Service Unavailable"
        );
        let claude = "Internal error: API Error: 529 {\"type\":\"error\"}";
        assert_eq!(error_text(claude, None), claude);
        let same = serde_json::json!("Internal error");
        assert_eq!(error_text("Internal error", Some(&same)), "Internal error");
        assert_eq!(
            error_text("x", Some(&serde_json::json!({"message": 3}))),
            "x"
        );
    }

    use super::*;
    use agent_client_protocol::v1::schema::{
        Content, Diff, PermissionOption, TextContent, ToolCallUpdate, ToolCallUpdateFields,
    };
    use serde_json::json;

    fn text(t: &str) -> ToolCallContent {
        ToolCallContent::Content(Content::new(ContentBlock::Text(TextContent::new(t))))
    }

    #[test]
    fn a_call_s_output_is_its_text_its_diffs_or_else_its_raw_output() {
        let both = vec![
            text("line 1"),
            ToolCallContent::Diff(Diff::new("/w/a.rs", "x")),
        ];
        assert_eq!(
            output(Some(&both), Some(&json!("ignored"))).as_deref(),
            Some("line 1\nedited /w/a.rs")
        );
        assert_eq!(
            output(None, Some(&json!("wrote 5 bytes"))).as_deref(),
            Some("wrote 5 bytes")
        );
        assert_eq!(
            output(Some(&vec![]), Some(&json!({"n": 1}))).as_deref(),
            Some("{\"n\":1}")
        );
        assert_eq!(output(Some(&vec![text("  \n")]), None), None);
        assert_eq!(output(None, None), None);
    }

    #[test]
    fn an_update_changes_only_what_it_carries() {
        let update = ToolCallUpdate::new(
            "c1",
            ToolCallUpdateFields::new().status(ToolCallStatus::Failed),
        );
        let TurnItem::Call(call) = item_of(SessionUpdate::ToolCallUpdate(update)) else {
            panic!("a tool call update is a call");
        };
        assert_eq!(
            call,
            AgentCall {
                id: "c1".into(),
                title: None,
                input: None,
                ended_ok: Some(false),
                output: None,
            }
        );
        let running = ToolCallUpdate::new(
            "c1",
            ToolCallUpdateFields::new().status(ToolCallStatus::InProgress),
        );
        let TurnItem::Call(call) = item_of(SessionUpdate::ToolCallUpdate(running)) else {
            panic!("a tool call update is a call");
        };
        assert_eq!(call.ended_ok, None, "in progress has not ended");
    }

    #[test]
    fn a_verdict_takes_the_agent_s_option_of_its_kind_or_the_nearest() {
        let ask = |kinds: &[PermissionOptionKind]| {
            let options = kinds
                .iter()
                .enumerate()
                .map(|(i, k)| PermissionOption::new(format!("o{i}"), "option", *k))
                .collect();
            RequestPermissionRequest::new(
                "s1",
                ToolCallUpdate::new("c1", ToolCallUpdateFields::new()),
                options,
            )
        };
        let chosen = |req: &RequestPermissionRequest, v| match answer(req, v).outcome {
            RequestPermissionOutcome::Selected(s) => Some(s.option_id.0.to_string()),
            _ => None,
        };
        let all = ask(&[
            PermissionOptionKind::AllowOnce,
            PermissionOptionKind::AllowAlways,
            PermissionOptionKind::RejectOnce,
        ]);
        assert_eq!(
            chosen(&all, Some(Decision::AllowAlways)).as_deref(),
            Some("o1")
        );
        assert_eq!(
            chosen(&all, Some(Decision::AllowOnce)).as_deref(),
            Some("o0")
        );
        // No reject_always offered: the nearest, reject_once.
        assert_eq!(
            chosen(&all, Some(Decision::RejectAlways)).as_deref(),
            Some("o2")
        );
        assert_eq!(
            chosen(&all, Some(Decision::TimedOut)).as_deref(),
            Some("o2"),
            "a wait that timed out rejects once"
        );
        assert_eq!(chosen(&all, None), None);
        // Nothing of the kind at all: the request is cancelled, never another kind chosen.
        let allow_only = ask(&[PermissionOptionKind::AllowOnce]);
        assert_eq!(chosen(&allow_only, Some(Decision::RejectOnce)), None);
    }
}
