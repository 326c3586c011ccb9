//! `/runs/:rid/tool_calls/:cid/decision` and `/approvals` (CONTRACT §8): the operator's
//! answers to the tool calls that wait for one.
use super::error::{ApiJson, ApiPath};
use super::AppState;
use crate::engine::Deciding;
use crate::error::Result;
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

/// `GET /approvals`: every call waiting, oldest first.
pub async fn list(State(state): State<AppState>) -> Result<Json<Approvals>> {
    Ok(Json(state.engine.approvals().await?))
}
