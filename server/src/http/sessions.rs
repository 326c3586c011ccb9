//! `/sessions…`: create, list, read, rename, post a message, release held prompts.
use super::error::{ApiJson, ApiPath, ApiQuery};
use super::AppState;
use crate::error::{Error, Result};
use app::wire::{
    CreateSession, CreatedSession, MessageId, PatchSession, PostMessage, Receipt, Session,
    SessionDetail, SessionId, SessionList,
};
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;

pub use crate::secrets::hex_sha256;

/// `POST /sessions`: a new session and its agent token.
pub async fn create(
    State(state): State<AppState>,
    ApiJson(body): ApiJson<CreateSession>,
) -> Result<(StatusCode, Json<CreatedSession>)> {
    let created = state.engine.create_session(body).await?;
    Ok((StatusCode::CREATED, Json(created)))
}

#[derive(serde::Deserialize)]
pub struct ListQuery {
    limit: Option<String>,
    before: Option<String>,
    q: Option<String>,
}

/// `GET /sessions[?limit=&before=&q=]`: newest first, 100 by default; `next_before` asks for
/// the next page; `q` keeps the sessions whose title holds each of its words.
pub async fn list(
    State(state): State<AppState>,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> Result<Json<SessionList>> {
    let limit = match q.limit.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(s) => Some(s.parse::<u64>().map_err(|_| {
            Error::invalid(format!(
                "`limit` {s:?} is not a whole number from 1 to {}",
                crate::store::MAX_SESSION_PAGE
            ))
        })?),
    };
    let page = crate::store::SessionPage::new(limit, q.before, q.q.as_deref())?;
    Ok(Json(state.engine.sessions(&page).await?))
}

#[derive(serde::Deserialize)]
pub struct DetailQuery {
    #[serde(default)]
    include_superseded: Option<String>,
}

pub async fn detail(
    State(state): State<AppState>,
    ApiPath(sid): ApiPath<SessionId>,
    ApiQuery(q): ApiQuery<DetailQuery>,
) -> Result<Json<SessionDetail>> {
    let include_superseded = match q.include_superseded.as_deref() {
        None | Some("false") | Some("0") => false,
        Some("true") | Some("1") | Some("") => true,
        Some(other) => {
            return Err(Error::invalid(format!(
                "include_superseded must be true or false, not {other:?}"
            )))
        }
    };
    Ok(Json(state.engine.snapshot(&sid, include_superseded).await?))
}

/// `PATCH /sessions/:sid`: its title, retry setting or tools.
pub async fn patch(
    State(state): State<AppState>,
    ApiPath(sid): ApiPath<SessionId>,
    ApiJson(body): ApiJson<PatchSession>,
) -> Result<Json<Session>> {
    Ok(Json(state.engine.patch_session(&sid, body).await?))
}

pub async fn post_message(
    State(state): State<AppState>,
    ApiPath(sid): ApiPath<SessionId>,
    ApiJson(body): ApiJson<PostMessage>,
) -> Result<(StatusCode, Json<Receipt>)> {
    let receipt = state.engine.post_message(&sid, &body.content).await?;
    Ok((StatusCode::ACCEPTED, Json(receipt)))
}

pub async fn release(
    State(state): State<AppState>,
    ApiPath(sid): ApiPath<SessionId>,
) -> Result<Json<app::wire::Released>> {
    let released = state.engine.release(&sid).await?;
    Ok(Json(app::wire::Released { released }))
}

pub async fn regenerate(
    State(state): State<AppState>,
    ApiPath((sid, mid)): ApiPath<(SessionId, MessageId)>,
    body: Option<ApiJson<app::wire::Regenerate>>,
) -> Result<(StatusCode, Json<Receipt>)> {
    let body = body.map(|ApiJson(b)| b).unwrap_or_default();
    crate::engine::check_tab_id(body.from.as_deref())?;
    let receipt = state
        .engine
        .regenerate(
            &sid,
            &mid,
            body.if_last_run.as_ref(),
            body.manual,
            body.from.as_deref(),
        )
        .await?;
    Ok((StatusCode::ACCEPTED, Json(receipt)))
}

pub async fn retry(
    State(state): State<AppState>,
    ApiPath(sid): ApiPath<SessionId>,
) -> Result<Json<app::wire::RetryReceipt>> {
    Ok(Json(state.engine.retry(&sid, None).await?))
}

/// `DELETE /sessions/:sid/waiting-retry`: ends the waiting background retry.
pub async fn cancel_waiting_retry(
    State(state): State<AppState>,
    ApiPath(sid): ApiPath<SessionId>,
) -> Result<Json<app::wire::Session>> {
    Ok(Json(state.engine.cancel_waiting_retry(&sid).await?))
}
