//! `/sessions…`: create, list, read, rename, post a message, release held prompts.
use super::error::{ApiJson, ApiPath, ApiQuery};
use super::AppState;
use crate::error::{Error, Result};
use app::wire::{
    CreateSession, CreatedSession, PatchSession, PostMessage, Receipt, Session, SessionDetail,
    SessionList,
};
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use sha2::Digest;

/// A session's title and model are at most this many characters (after trim).
const MAX_TITLE_CHARS: usize = 200;
const MAX_MODEL_CHARS: usize = 200;

pub async fn create(
    State(state): State<AppState>,
    ApiJson(body): ApiJson<CreateSession>,
) -> Result<(StatusCode, Json<CreatedSession>)> {
    let store = state.engine.store();
    let title = match body.title.as_deref().map(str::trim) {
        Some(t) if t.chars().count() > MAX_TITLE_CHARS => {
            return Err(Error::invalid(format!(
                "title is longer than {MAX_TITLE_CHARS} characters"
            )))
        }
        Some(t) if !t.is_empty() => t.to_string(),
        _ => "New session".to_string(),
    };
    let model = match body.model.as_deref().map(str::trim) {
        Some("") => {
            return Err(Error::invalid(
                "model is empty: leave it out for the default",
            ))
        }
        Some(m) if m.chars().count() > MAX_MODEL_CHARS => {
            return Err(Error::invalid(format!(
                "model is longer than {MAX_MODEL_CHARS} characters"
            )))
        }
        Some(m) => m.to_string(),
        None => state.config.default_model(),
    };
    if let Some(parent) = &body.parent_id {
        store
            .session(parent)
            .await
            .map_err(|_| Error::invalid(format!("parent_id {parent:?} is not a session")))?;
    }
    let tools = match &body.tools {
        Some(chosen) => state
            .engine
            .tools()
            .check_choice(chosen)
            .map_err(Error::invalid)?,
        None => state.engine.tools().names(),
    };
    let agent_token = crate::http::auth::random_token();
    let hash = hex_sha256(&agent_token);
    let session = store
        .create_session(
            &title,
            &model,
            body.parent_id.as_deref(),
            &hash,
            body.auto_retry.unwrap_or_default(),
            &tools,
        )
        .await?;
    state
        .engine
        .hub()
        .publish(&session.id, &app::wire::Event::Session(session.clone()));
    Ok((
        StatusCode::CREATED,
        Json(CreatedSession {
            session,
            agent_token,
        }),
    ))
}

pub fn hex_sha256(s: &str) -> String {
    sha2::Sha256::digest(s.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[derive(serde::Deserialize)]
pub struct ListQuery {
    limit: Option<String>,
    before: Option<String>,
}

/// `GET /sessions[?limit=&before=]`: newest first; the next page is `before=<the last id>`.
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
    let page = crate::store::SessionPage::new(limit, q.before)?;
    Ok(Json(SessionList {
        sessions: state.engine.sessions(&page).await?,
    }))
}

#[derive(serde::Deserialize)]
pub struct DetailQuery {
    #[serde(default)]
    include_superseded: Option<String>,
}

pub async fn detail(
    State(state): State<AppState>,
    ApiPath(sid): ApiPath<String>,
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

pub async fn patch(
    State(state): State<AppState>,
    ApiPath(sid): ApiPath<String>,
    ApiJson(body): ApiJson<PatchSession>,
) -> Result<Json<Session>> {
    let store = state.engine.store();
    store.session(&sid).await?;
    let title = body.title.as_deref().map(str::trim);
    if let Some(t) = title {
        if t.is_empty() || t.chars().count() > MAX_TITLE_CHARS {
            return Err(Error::invalid(format!(
                "title must be 1..={MAX_TITLE_CHARS} characters"
            )));
        }
    }
    let tools = match &body.tools {
        Some(chosen) => Some(
            state
                .engine
                .tools()
                .check_choice(chosen)
                .map_err(Error::invalid)?,
        ),
        None => None,
    };
    let session = state
        .engine
        .update_settings(&sid, title, body.auto_retry, tools.as_deref())
        .await?;
    Ok(Json(session))
}

pub async fn post_message(
    State(state): State<AppState>,
    ApiPath(sid): ApiPath<String>,
    ApiJson(body): ApiJson<PostMessage>,
) -> Result<(StatusCode, Json<Receipt>)> {
    let receipt = state.engine.post_message(&sid, &body.content).await?;
    Ok((StatusCode::ACCEPTED, Json(receipt)))
}

pub async fn release(
    State(state): State<AppState>,
    ApiPath(sid): ApiPath<String>,
) -> Result<Json<app::wire::Released>> {
    let released = state.engine.release(&sid).await?;
    Ok(Json(app::wire::Released { released }))
}

pub async fn regenerate(
    State(state): State<AppState>,
    ApiPath((sid, mid)): ApiPath<(String, String)>,
    body: Option<ApiJson<app::wire::Regenerate>>,
) -> Result<(StatusCode, Json<Receipt>)> {
    let body = body.map(|ApiJson(b)| b).unwrap_or_default();
    let receipt = state
        .engine
        .regenerate(&sid, &mid, body.if_last_run.as_deref(), body.manual)
        .await?;
    Ok((StatusCode::ACCEPTED, Json(receipt)))
}

pub async fn retry(
    State(state): State<AppState>,
    ApiPath(sid): ApiPath<String>,
) -> Result<Json<app::wire::RetryReceipt>> {
    Ok(Json(state.engine.retry(&sid, None).await?))
}

/// `DELETE /sessions/:sid/waiting-retry`: ends the waiting background retry.
pub async fn cancel_waiting_retry(
    State(state): State<AppState>,
    ApiPath(sid): ApiPath<String>,
) -> Result<Json<app::wire::Session>> {
    Ok(Json(state.engine.cancel_waiting_retry(&sid).await?))
}
