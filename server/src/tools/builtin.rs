//! The built-in `mulligan` tools (CONTRACT §5, §6): their definitions, their typed inputs,
//! who may call them ([`Caller`], `authorize`), and what each does through the session
//! commands. `http::mcp` serves them over MCP; an agent turn calls them with its own session
//! as the caller. The commands come in through `Commands`, so this module needs no engine.
use crate::error::Refusal;
use crate::error::{Error, Result};
use app::wire::SessionId;
use app::wire::{ModelList, Receipt, RetryReceipt, Run, ToolInfo};
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

/// The tools only the operator may call: never offered to a model.
pub const OPERATOR_ONLY: &[&str] = &["list_approvals", "decide_tool_call"];

/// `rename_session`.
#[derive(Debug, Deserialize)]
struct Rename {
    /// Omitted by an agent: its own session.
    #[serde(default)]
    session: Option<SessionId>,
    title: String,
}

/// `decide_tool_call`.
#[derive(Debug, Deserialize)]
struct Decide {
    run: app::wire::RunId,
    call: app::wire::ToolCallId,
    decision: app::wire::Decision,
    #[serde(default)]
    reason: Option<String>,
}

/// `list_sessions`: an optional page.
#[derive(Debug, Deserialize)]
struct ListSessions {
    #[serde(default)]
    limit: Option<u64>,
    #[serde(default)]
    before: Option<String>,
    #[serde(default)]
    q: Option<String>,
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
    RenameSession(Rename),
    ListApprovals(NoInput),
    Decision(Decide),
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
            "rename_session" => Call::RenameSession(input(name, args)?),
            "list_approvals" => Call::ListApprovals(input(name, args)?),
            "decide_tool_call" => Call::Decision(input(name, args)?),
            other => return Err(Error::not_found("tool", other)),
        })
    }
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

/// Runs tool `name` for `caller`; `Ok` is the API answer's JSON, `Err` the API's refusal.
pub(crate) async fn run(
    commands: &impl Commands,
    caller: &Caller,
    name: &str,
    args: Value,
) -> Result<Value> {
    let value = match Call::parse(name, args)? {
        Call::ListSessions(ListSessions { limit, before, q }) => {
            let within = match caller {
                Caller::Operator => None,
                Caller::Agent(me) => Some(me),
            };
            serde_json::to_value(
                commands
                    .sessions(limit, before, q.as_deref(), within)
                    .await?,
            )
        }
        Call::SendMessage(SendMessage { session, content }) => {
            authorize(commands, caller, &session).await?;
            serde_json::to_value(commands.post_message(&session, &content).await?)
        }
        Call::RetrySession(Target { session }) => {
            let from = authorize(commands, caller, &session).await?;
            serde_json::to_value(commands.retry(&session, from.as_deref()).await?)
        }
        Call::StopSession(Target { session }) => {
            authorize(commands, caller, &session).await?;
            serde_json::to_value(commands.stop(&session).await?)
        }
        // Read-only and secret-free: anyone who may call a tool may list the models.
        Call::ListModels(NoInput {}) => serde_json::to_value(commands.model_list().await),
        // An agent may rename its own session (the demo's tool that changes something).
        Call::RenameSession(Rename { session, title }) => {
            let session = match (session, caller) {
                (Some(s), _) => s,
                (None, Caller::Agent(me)) => me.clone(),
                (None, Caller::Operator) => {
                    return Err(Error::invalid(
                        "the arguments of `rename_session`: `session` is required",
                    ))
                }
            };
            if *caller != Caller::Agent(session.clone()) {
                authorize(commands, caller, &session).await?;
            }
            serde_json::to_value(commands.rename(&session, &title).await?)
        }
        Call::ListApprovals(NoInput {}) => {
            operator_only(caller)?;
            serde_json::to_value(commands.approvals().await?)
        }
        Call::Decision(Decide {
            run,
            call,
            decision,
            reason,
        }) => {
            operator_only(caller)?;
            let call = commands.decide(&run, &call, decision, reason).await?;
            serde_json::to_value(app::wire::DecidedCall { call })
        }
    };
    value.map_err(|e| Error::internal(format!("cannot encode the answer: {e}")))
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
            "List sessions, newest first: for the operator every session, for a session's agent token only that session's sub-sessions. 100 at a time (`limit`: 1 to 1000); when more follow, `next_before` is the `before` that lists the next page. `q` keeps the sessions whose title holds each of its words.",
            input(
                json!({
                    "limit": {"type": "integer", "minimum": 1, "maximum": 1000, "description": "At most this many sessions."},
                    "before": {"type": "string", "description": "Only sessions older than this one (the `next_before` of the previous page)."},
                    "q": {"type": "string", "description": "Words of the title (each must appear, in any case)."}
                }),
                &[],
            ),
        )
        .with_raw_output_schema(output(
            json!({
                "sessions": {"type": "array", "items": {"type": "object"}},
                "next_before": {"type": "string"}
            }),
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
        Tool::new(
            "rename_session",
            "Give a session a new title: the agent's own session, or one of its sub-sessions. Answers the session.",
            input(
                json!({"session": {"type": "string", "description": "The session's id; an agent may leave it out for its own session."}, "title": {"type": "string", "minLength": 1, "maxLength": 200, "description": "The new title."}}),
                &["title"],
            ),
        )
        .with_raw_output_schema(output(
            json!({"id": string, "title": string}),
            &["id", "title"],
        ))
        .with_annotations(
            ToolAnnotations::new()
                .read_only(false)
                .destructive(false)
                .idempotent(true),
        ),
        Tool::new(
            "list_approvals",
            "List the tool calls waiting for the operator's decision, oldest first (operator only).",
            input(json!({}), &[]),
        )
        .with_raw_output_schema(output(
            json!({"approvals": {"type": "array", "items": {"type": "object"}}}),
            &["approvals"],
        ))
        .with_annotations(ToolAnnotations::new().read_only(true)),
        Tool::new(
            "decide_tool_call",
            "Decide a tool call waiting for approval (operator only): allow_once, allow_always (this tool in this session from now on), reject_once or reject_always, with an optional reason the model is told. Refused with approval.decided or approval.not_waiting.",
            input(
                json!({"run": {"type": "string", "description": "The run's id."},
                       "call": {"type": "string", "description": "The tool call's id."},
                       "decision": {"type": "string", "enum": ["allow_once", "allow_always", "reject_once", "reject_always"]},
                       "reason": {"type": "string", "maxLength": app::wire::MAX_DECISION_REASON_CHARS}}),
                &["run", "call", "decision"],
            ),
        )
        .with_raw_output_schema(output(
            json!({"call": {"type": "object"}}),
            &["call"],
        ))
        .with_annotations(ToolAnnotations::new().destructive(false)),
    ]
}

/// The built-in tools as `GET /tools` and agent turns see them.
pub fn infos() -> Vec<ToolInfo> {
    tools()
        .into_iter()
        .filter(|t| !OPERATOR_ONLY.contains(&t.name.as_ref()))
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
mod tests {
    use super::*;
    use app::wire::ErrorCode;

    #[test]
    fn inputs_parse_into_their_calls_or_say_what_is_wrong() {
        assert!(matches!(
            Call::parse("list_sessions", Value::Null),
            Ok(Call::ListSessions(ListSessions {
                limit: None,
                before: None,
                q: None
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
