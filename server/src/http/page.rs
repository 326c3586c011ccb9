//! The page's first data: the signed-in operator's session list and open session, read from
//! the engine while the server renders the page (`app::page_data`), so the first HTML shows
//! them and the browser hydrates from there without asking again.
use super::auth::{presented_token, token_matches};
use super::AppState;
use crate::engine::Engine;
use app::page_data::{futures_box::BoxFuture, Loaded, PageSource, Source};
use app::wire::{SessionDetail, SessionList};
use leptos::prelude::{provide_context, use_context};
use std::sync::Arc;

/// Per request, while the page renders: the page source when the request carries the
/// operator's token (the cookie `/?token=` set), else none, and the page says to sign in.
pub fn provide_source(state: &AppState) {
    let Some(parts) = use_context::<axum::http::request::Parts>() else {
        return;
    };
    if presented_token(&parts.headers).is_some_and(|t| token_matches(t, &state.token)) {
        provide_context(Source(Arc::new(EngineSource(state.engine.clone()))));
    }
}

/// The page reads what `GET /sessions` and `GET /sessions/{id}` answer.
struct EngineSource(Engine);

impl PageSource for EngineSource {
    fn sessions(&self) -> BoxFuture<Loaded<SessionList>> {
        let engine = self.0.clone();
        Box::pin(async move {
            let page = crate::store::SessionPage::new(None, None).map_err(explain)?;
            let sessions = engine.sessions(&page).await.map_err(explain)?;
            Ok(SessionList { sessions })
        })
    }

    fn session(&self, id: String) -> BoxFuture<Loaded<SessionDetail>> {
        let engine = self.0.clone();
        Box::pin(async move { engine.snapshot(&id.into(), true).await.map_err(explain) })
    }
}

/// What the page says when a read fails: the API's message for the same read.
fn explain(e: impl Into<crate::error::Error>) -> String {
    e.into().message
}
