//! The built-in `mulligan` tools (CONTRACT §5, §6): each a `BuiltinTool` with a typed input
//! whose JSON Schema derives from the type, who may call them ([`Caller`]), and one list
//! ([`tools`], `run`) that the MCP adapter and an agent turn's tool list both read. The
//! commands come in through `Commands`, so this module needs no engine.
mod approvals;
mod sessions;

use crate::error::Refusal;
use crate::error::{Error, Result};
use app::wire::{ModelList, Receipt, RetryReceipt, Run, SessionId, ToolInfo};
use approvals::{DecideToolCall, ListApprovals};
use rmcp::model::{Tool, ToolAnnotations};
use rmcp::schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};
use sessions::{ListModels, ListSessions, RenameSession, RetrySession, SendMessage, StopSession};

/// Who is calling a tool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Caller {
    Operator,
    /// The holder of this session's agent token (or a turn of this session).
    Agent(SessionId),
}

/// The session commands the tools act through (the run engine implements them).
pub(crate) trait Commands {
    /// Whether `session` is `ancestor` or one of its sub-sessions.
    async fn is_descendant(&self, ancestor: &SessionId, session: &SessionId) -> Result<bool>;
    /// A page of the sessions (`GET /sessions`'s `limit`, `before`, `q`), only `within`'s
    /// family when given; `invalid` for a bad page.
    async fn sessions(
        &self,
        limit: Option<u64>,
        before: Option<String>,
        q: Option<&str>,
        within: Option<&SessionId>,
    ) -> Result<app::wire::SessionList>;
    async fn post_message(&self, session: &SessionId, content: &str) -> Result<Receipt>;
    async fn retry(&self, session: &SessionId, from: Option<&str>) -> Result<RetryReceipt>;
    async fn stop(&self, session: &SessionId) -> Result<Run>;
    /// The catalogue's models with their status now, as `GET /models` answers them.
    async fn model_list(&self) -> ModelList;
    /// Renames a session.
    async fn rename(&self, session: &SessionId, title: &str) -> Result<app::wire::Session>;
    /// `GET /approvals`.
    async fn approvals(&self) -> Result<app::wire::Approvals>;
    /// The operator's decision on a waiting call, from MCP.
    async fn decide(
        &self,
        run: &app::wire::RunId,
        call: &app::wire::ToolCallId,
        decision: app::wire::Decision,
        reason: Option<String>,
    ) -> Result<app::wire::ToolCall>;
}

/// A built-in tool: its input type, whose JSON Schema (doc comments and all) is the tool's
/// input schema, names the tool, says what it does and does it; its answer's type is the
/// tool's output schema.
pub(crate) trait BuiltinTool: DeserializeOwned + JsonSchema + 'static {
    const NAME: &'static str;
    const DESCRIPTION: &'static str;
    /// Only the operator may call it: it is never offered to a model.
    const OPERATOR_ONLY: bool = false;
    type Answer: Serialize + JsonSchema + 'static;

    fn annotations() -> Option<ToolAnnotations> {
        None
    }

    /// Does what the tool does for `caller`; `Err` is the API's refusal.
    async fn call(self, commands: &impl Commands, caller: &Caller) -> Result<Self::Answer>;
}

/// The tool list and the dispatch, written from one list of the tools' input types.
macro_rules! builtin_tools {
    ($($tool:ty),* $(,)?) => {
        /// The tools, with their input and output schemas.
        pub fn tools() -> Vec<Tool> {
            vec![$(definition::<$tool>()),*]
        }

        /// Whether tool `name` is the operator's alone (never offered to a model).
        pub fn operator_only(name: &str) -> bool {
            $( (name == <$tool>::NAME && <$tool>::OPERATOR_ONLY) )||*
        }

        /// Runs tool `name` for `caller`; `Ok` is the API answer's JSON, `Err` the API's
        /// refusal (`not_found` for a tool that is not built in).
        pub(crate) async fn run(
            commands: &impl Commands,
            caller: &Caller,
            name: &str,
            args: Value,
        ) -> Result<Value> {
            $(
                if name == <$tool>::NAME {
                    return dispatch::<$tool>(commands, caller, args).await;
                }
            )*
            Err(Error::not_found("tool", name))
        }
    };
}

builtin_tools!(
    ListSessions,
    SendMessage,
    RetrySession,
    StopSession,
    ListModels,
    RenameSession,
    ListApprovals,
    DecideToolCall,
);

/// Tool `T` as MCP lists it. An input without fields still says `properties: {}`, which
/// some providers' tool lists require.
fn definition<T: BuiltinTool>() -> Tool {
    let mut tool = Tool::new(T::NAME, T::DESCRIPTION, rmcp::model::JsonObject::new())
        .with_input_schema::<T>()
        .with_output_schema::<T::Answer>();
    if !tool.input_schema.contains_key("properties") {
        let mut schema = (*tool.input_schema).clone();
        schema.insert("properties".into(), json!({}));
        tool.input_schema = std::sync::Arc::new(schema);
    }
    match T::annotations() {
        Some(a) => tool.with_annotations(a),
        None => tool,
    }
}

/// `args` read as `T` (`null` as no arguments), or `invalid` saying what is wrong with them.
fn input<T: BuiltinTool>(args: Value) -> Result<T> {
    let args = match args {
        Value::Null => Value::Object(Default::default()),
        other => other,
    };
    serde_json::from_value(args)
        .map_err(|e| Error::invalid(format!("the arguments of `{}`: {e}", T::NAME)))
}

/// One call of tool `T`: its input parsed, the call made, the answer as JSON.
async fn dispatch<T: BuiltinTool>(
    commands: &impl Commands,
    caller: &Caller,
    args: Value,
) -> Result<Value> {
    let answer = input::<T>(args)?.call(commands, caller).await?;
    serde_json::to_value(answer)
        .map_err(|e| Error::internal(format!("cannot encode the answer: {e}")))
}

/// Whether `caller` may act on `session`: `Ok(from)`, the provenance to record (the calling
/// session for an agent), or `subsessions.not_family`.
async fn authorize(
    commands: &impl Commands,
    caller: &Caller,
    session: &SessionId,
) -> Result<Option<String>> {
    match caller {
        Caller::Operator => Ok(None),
        Caller::Agent(me) if commands.is_descendant(me, session).await? => Ok(Some(me.to_string())),
        Caller::Agent(me) => Err(Refusal::NotFamily {
            session: session.clone(),
            caller: me.clone(),
        }
        .into()),
    }
}

/// The API's error body of a tool's refusal (an internal failure is logged).
pub fn refusal_json(e: &Error) -> Value {
    if e.kind == crate::error::Kind::Internal {
        tracing::error!(error = %e, "a built-in tool failed");
    }
    json!({"error": {"code": e.code(), "message": e.message}})
}

/// The built-in tools as `GET /tools` and agent turns see them.
pub fn infos() -> Vec<ToolInfo> {
    tools()
        .into_iter()
        .filter(|t| !operator_only(&t.name))
        .map(|t| ToolInfo {
            name: t.name.to_string(),
            description: t.description.as_ref().map(|d| d.to_string()),
            input_schema: Value::Object((*t.input_schema).clone()),
            read_only: t.annotations.as_ref().and_then(|a| a.read_only_hint),
            destructive: t.annotations.as_ref().and_then(|a| a.destructive_hint),
            idempotent: t.annotations.as_ref().and_then(|a| a.idempotent_hint),
            open_world: t.annotations.as_ref().and_then(|a| a.open_world_hint),
        })
        .collect()
}

#[cfg(test)]
mod tests;
