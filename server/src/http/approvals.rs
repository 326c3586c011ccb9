//! `/runs/:rid/tool_calls/:cid/decision` and `/approvals` (CONTRACT §8): the operator's
//! answers to the tool calls that wait for one.
use super::error::{ApiJson, ApiPath, ApiQuery};
use super::AppState;
use crate::engine::Deciding;
use crate::engine::MAX_APPROVALS_LISTED;
use crate::error::{Error, Result};
use app::wire::{Approvals, DecideToolCall, DecidedBy, DecidedCall, RunId, ToolCallId};
use axum::extract::State;
use axum::Json;

/// `POST /runs/:rid/tool_calls/:cid/decision`: the call as decided.
pub async fn decide(
    State(state): State<AppState>,
    ApiPath((rid, cid)): ApiPath<(RunId, ToolCallId)>,
    ApiJson(body): ApiJson<DecideToolCall>,
) -> Result<Json<DecidedCall>> {
    let deciding = Deciding {
        decision: body.decision,
        reason: body.reason,
        by: Some(body.by.unwrap_or(DecidedBy::Api)),
        from: body.from,
    };
    let call = state.engine.decide(&rid, &cid, deciding).await?;
    Ok(Json(DecidedCall { call }))
}

#[derive(serde::Deserialize)]
pub struct ListQuery {
    limit: Option<String>,
    before: Option<String>,
}

/// `GET /approvals[?limit=&before=]`: the calls waiting, oldest first, 100 by default;
/// `next_before` asks for the next page.
pub async fn list(
    State(state): State<AppState>,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> Result<Json<Approvals>> {
    let limit = match q.limit.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(s) => Some(s.parse::<u64>().map_err(|_| {
            Error::invalid(format!(
                "`limit` {s:?} is not a whole number from 1 to {MAX_APPROVALS_LISTED}"
            ))
        })?),
    };
    let before = match q.before.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(id) => Some(
            id.parse::<ToolCallId>()
                .map_err(|e| Error::invalid(format!("`before`: {e}")))?,
        ),
    };
    Ok(Json(state.engine.approvals(limit, before.as_ref()).await?))
}
