//! The HTTP surface: `/api/v1` (CONTRACT §2), `/mcp` (§5, see `crate::mcp`), `/healthz`,
//! `/metrics`, the demo provider's endpoint and the server-rendered Leptos app. Handlers parse,
//! call the engine, map to the contract.
pub mod auth;
pub mod error;
mod providers;
mod runs;
mod sessions;
mod sse;

pub use sessions::hex_sha256;

use crate::config::Config;
use crate::engine::Engine;
use app::wire::{ClientConfig, MAX_BODY_BYTES};
use axum::extract::{DefaultBodyLimit, FromRef, State};
use axum::http::StatusCode;
use axum::routing::{delete, get, post};
use axum::{middleware, Json, Router};
use leptos::prelude::LeptosOptions;
use leptos_axum::{generate_route_list, LeptosRoutes};
use std::sync::Arc;

#[derive(Clone)]
pub struct AppState {
    pub engine: Engine,
    /// The provider-wide cooldowns (the provider's gate applies them).
    pub cooldowns: Arc<dyn crate::retry::cooldown::Table>,
    pub config: Arc<Config>,
    pub token: Arc<str>,
    pub leptos: LeptosOptions,
}

impl FromRef<AppState> for LeptosOptions {
    fn from_ref(s: &AppState) -> Self {
        s.leptos.clone()
    }
}

pub fn router(state: AppState) -> Router {
    let api = Router::new()
        .route("/sessions", post(sessions::create).get(sessions::list))
        .route(
            "/sessions/{sid}",
            get(sessions::detail).patch(sessions::patch),
        )
        .route("/sessions/{sid}/messages", post(sessions::post_message))
        .route("/sessions/{sid}/release", post(sessions::release))
        .route("/sessions/{sid}/retry", post(sessions::retry))
        .route(
            "/sessions/{sid}/waiting-retry",
            axum::routing::delete(sessions::cancel_waiting_retry),
        )
        .route(
            "/sessions/{sid}/messages/{mid}/regenerate",
            post(sessions::regenerate),
        )
        .route("/sessions/{sid}/runs/{rid}/cancel", post(runs::cancel))
        .route(
            "/sessions/{sid}/runs/{rid}/dismiss-retry",
            post(runs::dismiss_retry),
        )
        .route("/sessions/{sid}/events", get(sse::events))
        .route("/runs/{rid}", get(runs::detail))
        .route("/providers", get(providers::list))
        .route("/providers/cooldowns", delete(providers::clear))
        .route("/config", get(client_config))
        .fallback(|| async {
            error::respond(StatusCode::NOT_FOUND, "not_found", "no such API route")
        })
        .layer(middleware::from_fn_with_state(
            state.clone(),
            auth::require_operator,
        ))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES));

    let mcp = Router::new()
        .route_service("/mcp", crate::mcp::service(state.engine.clone()))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            crate::mcp::authenticate,
        ));

    let routes = generate_route_list(app::App);
    let leptos = state.leptos.clone();
    Router::new()
        .nest("/api/v1", api)
        .merge(mcp)
        .nest(
            "/demo/v1",
            crate::llm::demo::routes(std::time::Duration::from_millis(state.config.demo_delta_ms)),
        )
        .route("/healthz", get(|| async { "ok" }))
        .route("/metrics", get(metrics))
        .leptos_routes(&state, routes, move || app::shell(leptos.clone()))
        .fallback(leptos_axum::file_and_error_handler::<AppState, _>(
            app::shell,
        ))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            auth::cookie_from_query,
        ))
        .with_state(state)
}

async fn client_config(State(state): State<AppState>) -> Json<ClientConfig> {
    let c = &state.config;
    Json(ClientConfig {
        tier2_base_ms: c.tier2_base_ms,
        tier2_cap_ms: c.tier2_cap_ms,
        tier1_max_attempts: c.tier1_max_attempts,
    })
}

/// `/metrics`: Prometheus text, without auth like `/healthz` (counters only: no ids, no secrets).
async fn metrics() -> impl axum::response::IntoResponse {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        crate::metrics::metrics().render(),
    )
}
