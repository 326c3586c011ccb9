//! One tool call a model step asked for, checked before anything is recorded or sent: its
//! tool among those offered, its arguments as a JSON object, and what the approval policy
//! says of it. A call that cannot run is answered at once.
use super::conversation::text_boundary;
use super::RunTask;
use crate::approval::{self, Verdict};
use crate::clock::{new_id, now_ms};
use crate::llm::tool_calls::AssembledCall;
use crate::tools::Offered;
use app::wire::{ToolCall, ToolCallId, ToolCallStatus};
use serde_json::{Map, Value};

/// The longest call id a model may give (a longer or odd one is replaced).
pub(super) const MAX_CALL_ID: usize = 128;

/// One call of a step, checked and about to be recorded.
pub(super) struct Prepared {
    pub(super) ord: u32,
    pub(super) provider_id: String,
    pub(super) call: ToolCall,
    pub(super) found: Option<Offered>,
    pub(super) arguments: Option<Map<String, Value>>,
    pub(super) verdict: Verdict,
}

impl RunTask {
    /// A call the model asked for, checked: its tool, its arguments, and what the approval
    /// policy says of it. One that cannot run (no such tool, arguments that are not an
    /// object, a tool the session always rejects) is answered at once and never sent.
    pub(super) fn prepare(
        &self,
        a: AssembledCall,
        ord: u32,
        step: u32,
        offered: &[Offered],
    ) -> Prepared {
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

    #[test]
    fn arguments_must_be_an_object() {
        assert!(parse_arguments("").unwrap().is_empty());
        assert_eq!(parse_arguments(r#"{"a":1}"#).unwrap()["a"], 1);
        assert!(parse_arguments("[1]").unwrap_err().contains("array"));
        assert!(parse_arguments("{nope").is_err());
        assert_eq!(limited("héllo", 2), "h");
    }
}
