//! MCP (CONTRACT §5), with the official Rust SDK `rmcp`: the tools `list_sessions`,
//! `send_message`, `retry_session` and `stop_session`, served over streamable HTTP at `/mcp`,
//! and `mulligan mcp`, which carries MCP over stdio to that same endpoint.
//!
//! One implementation of the tools' semantics. The tools live only here, in the server, and
//! call the engine directly (the code path of the HTTP API: `post_message`, `retry`, `stop`),
//! so a tool's structured result is the API answer's JSON as is, and a refusal carries the
//! API's own code. `mulligan mcp` (in `cli`) is not a second MCP server: it is a bridge that
//! posts each JSON-RPC line read on stdin to the running server's `/mcp` (with
//! `MULLIGAN_URL`/`MULLIGAN_TOKEN`, like the other CLI commands) and writes each answer back
//! as one line on stdout. Running the engine in that process instead would start a second
//! engine on the same database, and reimplementing the tools over `/api/v1` would duplicate
//! the caller-authority rules; a bridge keeps both in one place.
//!
//! Caller authority: [`authenticate`] guards `/mcp` (`Authorization: Bearer`, no cookie, so a
//! browser page can never act through it) and tags the request with a [`Caller`]: the
//! operator acts on any session; a session's agent token (found by its sha256, compared in
//! constant time) acts only on that session's descendants (not on itself), and `list_sessions`
//! shows only those; anything else answers `subsessions.not_family`. Since the token is
//! mandatory, `rmcp`'s Host allow-list (a guard for unauthenticated local servers) is off, so
//! a server bound to a LAN address is reachable by name. The endpoint is stateless (no MCP
//! session to keep) and answers plain JSON.
use super::error::respond;
use super::{hex_sha256, AppState};
use crate::engine::Engine;
use crate::error::{Error, Kind, Result};
use app::wire::{ErrorCode, SessionList};
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, Implementation, JsonObject,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{json, Value};
use std::sync::Arc;
use subtle::ConstantTimeEq;

/// Who is calling a tool, as [`authenticate`] found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Caller {
    Operator,
    /// The holder of this session's agent token.
    Agent(String),
}

/// Guards `/mcp`: the operator token or a session's agent token, else 401 in the
/// contract's shape. Tags the request with its [`Caller`] for the tools.
pub async fn authenticate(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    let token = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty());
    let Some(token) = token else {
        return respond(
            StatusCode::UNAUTHORIZED,
            ErrorCode::Unauthorized,
            "send Authorization: Bearer <token>: the operator's, or a session's agent token",
        );
    };
    let caller = if super::auth::token_matches(token, &state.token) {
        Caller::Operator
    } else {
        match agent_of(&state.engine, token).await {
            Ok(Some(id)) => Caller::Agent(id),
            Ok(None) => {
                return respond(
                    StatusCode::UNAUTHORIZED,
                    ErrorCode::Unauthorized,
                    "the token is wrong",
                )
            }
            Err(e) => return e.into_response(),
        }
    };
    req.extensions_mut().insert(caller);
    next.run(req).await
}

/// The session whose agent token this is: looked up by the token's hash (indexed), the
/// stored hash compared again in constant time.
async fn agent_of(engine: &Engine, token: &str) -> Result<Option<String>> {
    let hash = hex_sha256(token);
    Ok(engine
        .store()
        .session_by_token_hash(&hash)
        .await?
        .filter(|(_, stored)| bool::from(stored.as_bytes().ct_eq(hash.as_bytes())))
        .map(|(id, _)| id))
}

/// Whether `caller` may act on `session`: `Ok(from)`, the provenance to record (the calling
/// session for an agent), or `subsessions.not_family`.
async fn authorize(engine: &Engine, caller: &Caller, session: &str) -> Result<Option<String>> {
    match caller {
        Caller::Operator => Ok(None),
        Caller::Agent(me) if engine.store().is_descendant(me, session).await? => {
            Ok(Some(me.clone()))
        }
        Caller::Agent(me) => Err(Error::refused(
            ErrorCode::SubsessionsNotFamily,
            format!("session {session:?} is not a descendant of {me:?}: an agent token acts only on its own session's sub-sessions"),
        )),
    }
}

/// The `/mcp` service (stateless streamable HTTP, JSON answers); mount it behind [`authenticate`].
pub fn service(engine: Engine) -> StreamableHttpService<Mulligan, NeverSessionManager> {
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .disable_allowed_hosts()
        .with_max_request_body_bytes(app::wire::MAX_BODY_BYTES);
    StreamableHttpService::new(
        move || Ok(Mulligan::new(engine.clone())),
        Arc::new(NeverSessionManager::default()),
        config,
    )
}

/// The MCP server handler: Mulligan's tools over its engine.
#[derive(Clone)]
pub struct Mulligan {
    engine: Engine,
}

impl Mulligan {
    pub fn new(engine: Engine) -> Self {
        Mulligan { engine }
    }

    /// Runs one tool; `Ok` is the API answer's JSON, `Err` the API's refusal. Also how an
    /// agent turn calls the built-in `mulligan` tools (with its session as the caller).
    pub(crate) async fn run(&self, caller: &Caller, name: &str, args: Value) -> Result<Value> {
        let engine = &self.engine;
        let arg = |key: &str| -> Result<String> {
            match args.get(key) {
                Some(Value::String(s)) => Ok(s.clone()),
                Some(_) => Err(Error::invalid(format!("`{key}` must be a string"))),
                None => Err(Error::invalid(format!("`{key}` is required"))),
            }
        };
        let value = match name {
            "list_sessions" => {
                let limit = match args.get("limit") {
                    None | Some(Value::Null) => None,
                    Some(Value::Number(n)) => Some(n.as_u64().ok_or_else(|| {
                        Error::invalid("`limit` must be a whole number from 1 to 1000")
                    })?),
                    Some(_) => return Err(Error::invalid("`limit` must be a number")),
                };
                let before = match args.get("before") {
                    None | Some(Value::Null) => None,
                    Some(Value::String(s)) => Some(s.clone()),
                    Some(_) => return Err(Error::invalid("`before` must be a session id")),
                };
                let page = crate::store::SessionPage::new(limit, before)?;
                let sessions = match caller {
                    Caller::Operator => engine.store().sessions(&page).await?,
                    // The family is filtered first, then paged, so pages are never short.
                    Caller::Agent(me) => engine.store().descendant_sessions(&page, me).await?,
                };
                serde_json::to_value(SessionList { sessions })
            }
            "send_message" => {
                let (session, content) = (arg("session")?, arg("content")?);
                authorize(engine, caller, &session).await?;
                serde_json::to_value(engine.post_message(&session, &content).await?)
            }
            "retry_session" => {
                let session = arg("session")?;
                let from = authorize(engine, caller, &session).await?;
                serde_json::to_value(engine.retry(&session, from.as_deref()).await?)
            }
            "stop_session" => {
                let session = arg("session")?;
                authorize(engine, caller, &session).await?;
                serde_json::to_value(engine.stop(&session).await?)
            }
            other => return Err(Error::not_found("tool", other)),
        };
        value.map_err(|e| Error::internal(format!("cannot encode the answer: {e}")))
    }
}

/// The four tools, with their input and output schemas.
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
    ]
}

/// A refusal: a tool result with `isError: true` carrying the API's error body.
fn refusal(e: &Error) -> CallToolResult {
    CallToolResult::structured_error(refusal_json(e))
}

/// The API's error body of a tool's refusal (an internal failure is logged).
pub fn refusal_json(e: &Error) -> Value {
    if e.kind == Kind::Internal {
        tracing::error!(error = %e, "an MCP tool failed");
    }
    json!({"error": {"code": e.code(), "message": e.message}})
}

/// The built-in tools as `GET /tools` and agent turns see them.
pub fn builtin_infos() -> Vec<app::wire::ToolInfo> {
    tools()
        .into_iter()
        .map(|t| app::wire::ToolInfo {
            name: t.name.to_string(),
            description: t.description.as_ref().map(|d| d.to_string()),
            input_schema: Value::Object((*t.input_schema).clone()),
            read_only: t.annotations.as_ref().and_then(|a| a.read_only_hint),
            destructive: t.annotations.as_ref().and_then(|a| a.destructive_hint),
        })
        .collect()
}

impl ServerHandler for Mulligan {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("mulligan", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Mulligan runs LLM agent sessions that recover from provider failures. \
                 Tools answer the HTTP API's JSON; a refusal is a tool error whose \
                 structured content is {\"error\": {\"code\", \"message\"}}.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> std::result::Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        tools().into_iter().find(|t| t.name == name)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> std::result::Result<CallToolResponse, ErrorData> {
        if self.get_tool(&request.name).is_none() {
            return Err(ErrorData::invalid_params(
                format!("no tool named {:?}", request.name),
                None,
            ));
        }
        let caller = context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|p| p.extensions.get::<Caller>())
            .cloned();
        let Some(caller) = caller else {
            let e = Error::new(Kind::Unauthorized, "this request carried no caller");
            return Ok(refusal(&e).into());
        };
        let args = Value::Object(request.arguments.unwrap_or_default());
        Ok(match self.run(&caller, &request.name, args).await {
            Ok(value) => CallToolResult::structured(value),
            Err(e) => refusal(&e),
        }
        .into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn four_tools_each_with_object_schemas() {
        let tools = tools();
        let names: Vec<_> = tools.iter().map(|t| t.name.as_ref()).collect();
        assert_eq!(
            names,
            [
                "list_sessions",
                "send_message",
                "retry_session",
                "stop_session"
            ]
        );
        for t in &tools {
            assert_eq!(t.input_schema["type"], "object", "{}", t.name);
            assert_eq!(t.output_schema.as_ref().unwrap()["type"], "object");
        }
        let refused = refusal(&Error::refused(ErrorCode::RetryBusy, "wait"));
        assert_eq!(refused.is_error, Some(true));
        assert_eq!(
            refused.structured_content,
            Some(json!({"error": {"code": ErrorCode::RetryBusy.as_str(), "message": "wait"}}))
        );
    }
}
