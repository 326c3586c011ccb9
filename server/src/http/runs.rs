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
    let store = state.engine.store();
    let (run, owner) = store.run_and_owner(&rid).await?;
    let mut attempts = store.attempts(&rid).await?;
    // An attempt on the session's own model is recorded without it: named here.
    if attempts.iter().any(|a| a.model.is_none()) {
        let model = store.session(&run.session_id).await?.session.model;
        let model = match state.engine.models().catalogue().resolve(&model) {
            Ok(m) => m.id(),
            Err(_) => model,
        };
        for a in attempts.iter_mut().filter(|a| a.model.is_none()) {
            a.model = Some(model.clone());
        }
    }
    let tool_calls = match &run.reply_message_id {
        Some(reply) => store
            .tool_calls_of_message(reply)
            .await?
            .into_iter()
            .map(|c| c.call)
            .collect(),
        None => Vec::new(),
    };
    Ok(Json(RunDetail {
        run,
        attempts,
        tool_calls,
        // One instance needs no name: it is the only one.
        instance: owner.filter(|_| store.is_shared()),
    }))
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
