//! The built-in `mulligan` tools (CONTRACT §5, §6): their definitions, their typed inputs,
//! who may call them ([`Caller`], [`authorize`]), and what each does through the session
//! commands. `http::mcp` serves them over MCP; an agent turn calls them with its own session
//! as the caller. The commands come in through [`Commands`], so this module needs no engine.
use crate::engine::Refusal;
use crate::error::{Error, Result};
use crate::store::{SessionPage, Store};
use app::wire::SessionId;
use app::wire::{ModelList, Receipt, RetryReceipt, Run, SessionList, ToolInfo};
use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;

/// Who is calling a tool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Caller {
    Operator,
    /// The holder of this session's agent token (or a turn of this session).
    Agent(SessionId),
}

/// The session commands the tools act through (the run engine implements them).
pub(crate) trait Commands {
    fn store(&self) -> &Store;
    async fn post_message(&self, session: &SessionId, content: &str) -> Result<Receipt>;
    async fn retry(&self, session: &SessionId, from: Option<&str>) -> Result<RetryReceipt>;
    async fn stop(&self, session: &SessionId) -> Result<Run>;
    /// The catalogue's models with their status now, as `GET /models` answers them.
    async fn model_list(&self) -> ModelList;
}

/// `list_sessions`: an optional page.
#[derive(Debug, Deserialize)]
struct ListSessions {
    #[serde(default)]
    limit: Option<u64>,
    #[serde(default)]
    before: Option<String>,
}

/// `send_message`.
#[derive(Debug, Deserialize)]
struct SendMessage {
    session: SessionId,
    content: String,
}

/// `retry_session` and `stop_session`: the session acted on.
#[derive(Debug, Deserialize)]
struct Target {
    session: SessionId,
}

/// `list_models`: no input.
#[derive(Debug, Deserialize)]
struct NoInput {}

/// One call of a built-in tool, its input parsed.
#[derive(Debug)]
enum Call {
    ListSessions(ListSessions),
    SendMessage(SendMessage),
    RetrySession(Target),
    StopSession(Target),
    ListModels(NoInput),
}

impl Call {
    /// The call of tool `name` with `args`, or `invalid` saying what is wrong with them.
    fn parse(name: &str, args: Value) -> Result<Call> {
        fn input<T: DeserializeOwned>(name: &str, args: Value) -> Result<T> {
            let args = match args {
                Value::Null => Value::Object(Default::default()),
                other => other,
            };
            serde_json::from_value(args)
                .map_err(|e| Error::invalid(format!("the arguments of `{name}`: {e}")))
        }
        Ok(match name {
            "list_sessions" => Call::ListSessions(input(name, args)?),
            "send_message" => Call::SendMessage(input(name, args)?),
            "retry_session" => Call::RetrySession(input(name, args)?),
            "stop_session" => Call::StopSession(input(name, args)?),
            "list_models" => Call::ListModels(input(name, args)?),
            other => return Err(Error::not_found("tool", other)),
        })
    }
}

/// Whether `caller` may act on `session`: `Ok(from)`, the provenance to record (the calling
/// session for an agent), or `subsessions.not_family`.
async fn authorize(store: &Store, caller: &Caller, session: &SessionId) -> Result<Option<String>> {
    match caller {
        Caller::Operator => Ok(None),
        Caller::Agent(me) if store.is_descendant(me, session).await? => Ok(Some(me.to_string())),
        Caller::Agent(me) => Err(Refusal::NotFamily {
            session: session.clone(),
            caller: me.clone(),
        }
        .into()),
    }
}

/// Runs tool `name` for `caller`; `Ok` is the API answer's JSON, `Err` the API's refusal.
pub(crate) async fn run(
    commands: &impl Commands,
    caller: &Caller,
    name: &str,
    args: Value,
) -> Result<Value> {
    let store = commands.store();
    let value = match Call::parse(name, args)? {
        Call::ListSessions(ListSessions { limit, before }) => {
            let page = SessionPage::new(limit, before)?;
            let sessions = match caller {
                Caller::Operator => store.sessions(&page).await?,
                // The family is filtered first, then paged, so pages are never short.
                Caller::Agent(me) => store.descendant_sessions(&page, me).await?,
            };
            serde_json::to_value(SessionList { sessions })
        }
        Call::SendMessage(SendMessage { session, content }) => {
            authorize(store, caller, &session).await?;
            serde_json::to_value(commands.post_message(&session, &content).await?)
        }
        Call::RetrySession(Target { session }) => {
            let from = authorize(store, caller, &session).await?;
            serde_json::to_value(commands.retry(&session, from.as_deref()).await?)
        }
        Call::StopSession(Target { session }) => {
            authorize(store, caller, &session).await?;
            serde_json::to_value(commands.stop(&session).await?)
        }
        // Read-only and secret-free: anyone who may call a tool may list the models.
        Call::ListModels(NoInput {}) => serde_json::to_value(commands.model_list().await),
    };
    value.map_err(|e| Error::internal(format!("cannot encode the answer: {e}")))
}

/// The API's error body of a tool's refusal (an internal failure is logged).
pub fn refusal_json(e: &Error) -> Value {
    if e.kind == crate::error::Kind::Internal {
        tracing::error!(error = %e, "a built-in tool failed");
    }
    json!({"error": {"code": e.code(), "message": e.message}})
}

/// The tools, with their input and output schemas.
pub fn tools() -> Vec<Tool> {
    let session = json!({"type": "string", "description": "The session's id (see list_sessions)."});
    let schema = |v: Value| -> Arc<JsonObject> {
        match v {
            Value::Object(o) => Arc::new(o),
            _ => unreachable!("schemas are objects"),
        }
    };
    let object = |props: Value, required: &[&str]| {
        schema(json!({"type": "object", "properties": props, "required": required}))
    };
    let (input, output) = (object, object);
    let string = json!({"type": "string"});
    vec![
        Tool::new(
            "list_sessions",
            "List sessions, newest first: all of them for the operator; for a session's agent token, only that session's sub-sessions. Optional paging: `limit` (1 to 1000) and `before` (the last session id of the previous page).",
            input(
                json!({
                    "limit": {"type": "integer", "minimum": 1, "maximum": 1000, "description": "At most this many sessions."},
                    "before": {"type": "string", "description": "Only sessions older than this one (the last id of the previous page)."}
                }),
                &[],
            ),
        )
        .with_raw_output_schema(output(
            json!({"sessions": {"type": "array", "items": {"type": "object"}}}),
            &["sessions"],
        ))
        .with_annotations(ToolAnnotations::new().read_only(true)),
        Tool::new(
            "send_message",
            "Post an operator message to a session; it starts a run, or queues behind the active one. Answers the receipt.",
            input(
                json!({"session": session, "content": {"type": "string", "minLength": 1, "maxLength": app::wire::MAX_CONTENT_CHARS, "description": "The message."}}),
                &["session", "content"],
            ),
        )
        .with_raw_output_schema(output(
            json!({"message_id": string, "run_id": string, "queued": {"type": "boolean"},
                   "superseded": {"type": "array", "items": string}}),
            &["message_id", "run_id", "queued", "superseded"],
        )),
        Tool::new(
            "retry_session",
            "Retry the session's failed last turn now: resends the prompt, or continues a partial reply. Refused with retry.busy, retry.stopped or retry.nothing_failed.",
            input(json!({"session": session}), &["session"]),
        )
        .with_raw_output_schema(output(
            json!({"prompt_id": string, "run_id": string,
                   "kind": {"type": "string", "enum": ["resend", "continuation"]}}),
            &["prompt_id", "run_id", "kind"],
        )),
        Tool::new(
            "stop_session",
            "Stop what the session is doing: cancels its running run (else its next queued one) and its waiting background retry, and answers that run (with only a waiting retry, the failed run it was for). Refused with conflict when nothing runs or waits.",
            input(json!({"session": session}), &["session"]),
        )
        .with_raw_output_schema(output(
            json!({"id": string, "session_id": string, "status": string}),
            &["id", "session_id", "status"],
        ))
        .with_annotations(ToolAnnotations::new().destructive(true)),
        Tool::new(
            "list_models",
            "List the models a session can use: each `<provider>/<model>` id with its status (ok; cooling until `cooling_until`, ms since the epoch; down), whether its steps are sent tools, and the chain it falls back to before a step's first delta; and the default model.",
            input(json!({}), &[]),
        )
        .with_raw_output_schema(output(
            json!({"models": {"type": "array", "items": {"type": "object", "properties": {
                       "id": string, "provider": string, "kind": string,
                       "tools": {"type": "boolean"}, "status": string,
                       "cooling_until": {"type": "integer"},
                       "fallbacks": {"type": "array", "items": string}}}},
                   "default_model": string}),
            &["models", "default_model"],
        ))
        .with_annotations(ToolAnnotations::new().read_only(true)),
    ]
}

/// The built-in tools as `GET /tools` and agent turns see them.
pub fn infos() -> Vec<ToolInfo> {
    tools()
        .into_iter()
        .map(|t| ToolInfo {
            name: t.name.to_string(),
            description: t.description.as_ref().map(|d| d.to_string()),
            input_schema: Value::Object((*t.input_schema).clone()),
            read_only: t.annotations.as_ref().and_then(|a| a.read_only_hint),
            destructive: t.annotations.as_ref().and_then(|a| a.destructive_hint),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use app::wire::ErrorCode;

    #[test]
    fn inputs_parse_into_their_calls_or_say_what_is_wrong() {
        assert!(matches!(
            Call::parse("list_sessions", Value::Null),
            Ok(Call::ListSessions(ListSessions {
                limit: None,
                before: None
            }))
        ));
        assert!(matches!(
            Call::parse("send_message", json!({"session": "s", "content": "hi"})),
            Ok(Call::SendMessage(SendMessage { .. }))
        ));
        let missing = Call::parse("send_message", json!({"session": "s"})).unwrap_err();
        assert_eq!(missing.code(), ErrorCode::InvalidRequest);
        assert!(missing.message.contains("content"), "{}", missing.message);
        let wrong = Call::parse("retry_session", json!({"session": 7})).unwrap_err();
        assert!(wrong.message.contains("retry_session"), "{}", wrong.message);
        let limit = Call::parse("list_sessions", json!({"limit": -1})).unwrap_err();
        assert_eq!(limit.code(), ErrorCode::InvalidRequest);
        assert!(matches!(
            Call::parse("list_models", Value::Null),
            Ok(Call::ListModels(NoInput {}))
        ));
        let unknown = Call::parse("rm_rf", json!({})).unwrap_err();
        assert_eq!(unknown.code(), ErrorCode::NotFound);
    }
}
