//! MCP (CONTRACT §5), with the official Rust SDK `rmcp`: the tools `list_sessions`,
//! `send_message`, `retry_session`, `stop_session`, `list_models`, `rename_session` and, for
//! the operator only, `list_approvals` and `decide_tool_call` (CONTRACT §8), served over
//! streamable HTTP at `/mcp`, and `mulligan mcp`, which carries MCP over stdio to that same endpoint.
//!
//! One implementation of the tools' semantics, in `tools::builtin`; this module only adapts
//! it to `rmcp`. The tools call the engine directly (the code path of the HTTP API:
//! `post_message`, `retry`, `stop`), so a tool's structured result is the API answer's JSON
//! as is, and a refusal carries the API's own code. `mulligan mcp` (in `cli`) is not a second MCP server: it is a bridge that
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
pub use crate::tools::builtin::Caller;
use crate::tools::builtin::{self, refusal_json, tools};
use app::wire::ErrorCode;
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::Value;
use std::sync::Arc;
use subtle::ConstantTimeEq;

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
async fn agent_of(engine: &Engine, token: &str) -> Result<Option<app::wire::SessionId>> {
    let hash = hex_sha256(token);
    Ok(engine
        .store()
        .session_by_token_hash(&hash)
        .await?
        .filter(|(_, stored)| bool::from(stored.as_bytes().ct_eq(hash.as_bytes())))
        .map(|(id, _)| id))
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
}

/// A refusal: a tool result with `isError: true` whose text is the API's error body, and
/// no structured content: clients validate that against the tool's `outputSchema` (the
/// answer's shape), which an error body does not match (CONTRACT §5).
fn refusal(e: &Error) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(refusal_json(e).to_string())])
}

impl ServerHandler for Mulligan {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("mulligan", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Mulligan runs LLM agent sessions that recover from provider failures. \
                 Tools answer the HTTP API's JSON; a refusal is a tool error whose \
                 text is {\"error\": {\"code\", \"message\"}}.",
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
        Ok(
            match builtin::run(&self.engine, &caller, &request.name, args).await {
                Ok(value) => CallToolResult::structured(value),
                Err(e) => refusal(&e),
            }
            .into(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A refusal is an error result whose one text block is the API's error body (the tool
    /// list itself is `tools::builtin`'s, tested there).
    #[test]
    fn a_refusal_is_the_apis_error_body_as_text() {
        let busy = crate::error::Refusal::RetryBusy;
        let refused = refusal(&busy.clone().into());
        assert_eq!(refused.is_error, Some(true));
        assert_eq!(refused.structured_content, None);
        let text = match refused.content.as_slice() {
            [ContentBlock::Text(t)] => t.text.clone(),
            other => panic!("one text block: {other:?}"),
        };
        assert_eq!(
            serde_json::from_str::<Value>(&text).unwrap(),
            json!({"error": {"code": "retry.busy", "message": busy.to_string()}})
        );
    }
}
