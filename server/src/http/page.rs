//! The page's first data: the signed-in operator's session list and, on a session's page, its
//! snapshot, read from the engine before the page renders and provided to the render; the
//! views read them through Leptos' shared values (`app::page_data`), so the first HTML shows
//! them and the browser hydrates from the same data.
use super::auth::{presented_token, token_matches};
use super::AppState;
use app::nav::Page;
use app::page_data::{Loaded, PageData};
use app::wire::{SessionId, SessionList};
use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderValue, Request};
use axum::response::Response;
use leptos::nonce::use_nonce;
use leptos::prelude::{provide_context, use_context};
use leptos_axum::ResponseOptions;

/// What a page rendered without the operator's cookie says (as the API's refusal does).
const SIGNED_OUT: &str = "Not signed in: open the URL that `mulligan serve` printed.";

/// Renders a page of the app with its first data.
pub async fn render(State(state): State<AppState>, req: Request<Body>) -> Response {
    let signed_in = presented_token(req.headers()).is_some_and(|t| token_matches(t, &state.token));
    let path = req.uri().path().to_string();
    let session_id = match Page::of_path(&path) {
        Page::Session(id) => Some(id),
        Page::Home | Page::Unknown => None,
    };
    let data = match signed_in {
        true => load(&state, session_id).await,
        false => PageData {
            sessions: Some(Err(SIGNED_OUT.into())),
            session: session_id.map(|_| Err(SIGNED_OUT.into())),
            config: None,
        },
    };
    let options = state.leptos.clone();
    let handler = leptos_axum::render_app_to_stream_with_context(
        move || {
            provide_context(data.clone());
            secure();
        },
        move || app::shell(options.clone()),
    );
    handler(req).await
}

/// The headers of a rendered page, set in its rendering's context (also the shell that
/// unknown paths get): no other site may frame it (it shows the operator's sessions), and
/// its Content-Security-Policy lets only this server's scripts and the inline scripts that
/// carry this response's nonce run. Leptos makes that nonce per response (`use_nonce`) and
/// puts it on every inline script it writes (the hydration loader, the page's first data,
/// streamed chunks). `'wasm-unsafe-eval'` lets the page
/// instantiate its WebAssembly. Outside a page's rendering (no nonce), nothing is set.
pub fn secure() {
    let (Some(nonce), Some(res)) = (use_nonce(), use_context::<ResponseOptions>()) else {
        return;
    };
    let policy = format!(
        "script-src 'self' 'nonce-{nonce}' 'wasm-unsafe-eval'; object-src 'none'; \
         base-uri 'none'; frame-ancestors 'none'"
    );
    // The nonce is base64url: always a valid header value.
    if let Ok(policy) = HeaderValue::from_str(&policy) {
        res.insert_header(header::CONTENT_SECURITY_POLICY, policy);
    }
    res.insert_header(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
}

/// The list, and the snapshot of the session whose page it is.
async fn load(state: &AppState, session_id: Option<SessionId>) -> PageData {
    let engine = &state.engine;
    let sessions: Loaded<SessionList> = async {
        // The first page, as `GET /sessions` answers it: the page grows with a click.
        let page = crate::store::SessionPage::new(None, None, None).map_err(explain)?;
        engine.sessions(&page).await.map_err(explain)
    }
    .await;
    let session = match session_id {
        Some(id) => Some(engine.snapshot(&id, true).await.map_err(explain)),
        None => None,
    };
    PageData {
        sessions: Some(sessions),
        session,
        config: Some(super::client_config_of(&state.config)),
    }
}

/// What the page says when a read fails: the API's message for the same read.
fn explain(e: impl Into<crate::error::Error>) -> String {
    e.into().message
}
