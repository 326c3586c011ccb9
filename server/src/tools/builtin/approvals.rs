//! The operator's built-in tools for tool calls waiting for approval (CONTRACT §8):
//! `list_approvals` and `decide_tool_call`. An agent never sees or decides them.
use super::{BuiltinTool, Caller, Commands};
use crate::error::{Error, Result};
use app::wire::{Approvals, DecidedCall, Decision, RunId, ToolCallId};
use rmcp::model::ToolAnnotations;
use rmcp::schemars::JsonSchema;
use serde::Deserialize;

/// `list_approvals`: no input.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct ListApprovals {}

impl BuiltinTool for ListApprovals {
    const NAME: &'static str = "list_approvals";
    const DESCRIPTION: &'static str =
        "List the tool calls waiting for the operator's decision, oldest first (operator only).";
    const OPERATOR_ONLY: bool = true;
    type Answer = Approvals;

    fn annotations() -> Option<ToolAnnotations> {
        Some(ToolAnnotations::new().read_only(true))
    }

    async fn call(self, commands: &impl Commands, caller: &Caller) -> Result<Approvals> {
        operator_only(caller)?;
        commands.approvals().await
    }
}

/// `decide_tool_call`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct DecideToolCall {
    /// The run's id.
    pub run: RunId,
    /// The tool call's id.
    pub call: ToolCallId,
    #[schemars(schema_with = "operator_decisions")]
    pub decision: Decision,
    /// Told to the model with the decision.
    #[serde(default)]
    #[schemars(length(max = app::wire::MAX_DECISION_REASON_CHARS))]
    pub reason: Option<String>,
}

impl BuiltinTool for DecideToolCall {
    const NAME: &'static str = "decide_tool_call";
    const DESCRIPTION: &'static str = "Decide a tool call waiting for approval (operator only): allow_once, allow_always (this tool in this session from now on), reject_once or reject_always, with an optional reason the model is told. Refused with approval.decided or approval.not_waiting.";
    const OPERATOR_ONLY: bool = true;
    type Answer = DecidedCall;

    fn annotations() -> Option<ToolAnnotations> {
        Some(ToolAnnotations::new().destructive(false))
    }

    async fn call(self, commands: &impl Commands, caller: &Caller) -> Result<DecidedCall> {
        operator_only(caller)?;
        let call = commands
            .decide(&self.run, &self.call, self.decision, self.reason)
            .await?;
        Ok(DecidedCall { call })
    }
}

/// The decisions an operator makes (`timed_out` is the server's own).
fn operator_decisions(_: &mut rmcp::schemars::SchemaGenerator) -> rmcp::schemars::Schema {
    let choices: Vec<&str> = Decision::ALL
        .iter()
        .filter(|d| **d != Decision::TimedOut)
        .map(|d| d.as_str())
        .collect();
    rmcp::schemars::json_schema!({"type": "string", "enum": choices})
}

/// `forbidden` for an agent: only the operator decides tool calls (CONTRACT §8).
fn operator_only(caller: &Caller) -> Result<()> {
    match caller {
        Caller::Operator => Ok(()),
        Caller::Agent(_) => Err(Error::new(
            crate::error::Kind::Forbidden,
            "an agent token never sees or decides tool calls waiting for approval, its own or \
             its sub-sessions': only the operator does",
        )),
    }
}
