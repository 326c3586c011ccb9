//! `/runs/:rid`, `/sessions/:sid/runs/:rid/cancel` and `…/dismiss-retry`.
use super::error::ApiPath;
use super::AppState;
use crate::error::Result;
use app::wire::{Run, RunDetail, RunId, SessionId};
use axum::extract::State;
use axum::Json;

pub async fn detail(
    State(state): State<AppState>,
    ApiPath(rid): ApiPath<RunId>,
) -> Result<Json<RunDetail>> {
    Ok(Json(state.engine.run_detail(&rid).await?))
}

pub async fn cancel(
    State(state): State<AppState>,
    ApiPath((sid, rid)): ApiPath<(SessionId, RunId)>,
) -> Result<Json<Run>> {
    Ok(Json(state.engine.cancel(&sid, &rid).await?))
}

/// `POST /sessions/:sid/runs/:rid/dismiss-retry`: the operator cancelled Tier 2 for this run.
pub async fn dismiss_retry(
    State(state): State<AppState>,
    ApiPath((sid, rid)): ApiPath<(SessionId, RunId)>,
) -> Result<Json<Run>> {
    Ok(Json(state.engine.dismiss_retry(&sid, &rid).await?))
}
