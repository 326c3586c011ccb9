//! The HTTP surface: `/api/v1` (CONTRACT §2), `/mcp` (§5, see [`mcp`]), `/healthz`,
//! `/metrics`, the demo provider's endpoint and the server-rendered Leptos app. Handlers parse,
//! call the engine, map to the contract.
pub mod auth;
pub mod error;
pub mod mcp;
mod providers;
mod runs;
mod sessions;
mod sse;

pub use sessions::hex_sha256;

use crate::config::Config;
use crate::engine::Engine;
use app::wire::{ClientConfig, ErrorCode, MAX_BODY_BYTES};
use axum::extract::{DefaultBodyLimit, FromRef, State};
use axum::handler::Handler;
use axum::http::StatusCode;
use axum::routing::{get, on, MethodFilter};
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
    use app::api;
    let api = Router::new()
        .mount(api::CREATE_SESSION.route, sessions::create)
        .mount(api::LIST_SESSIONS.route, sessions::list)
        .mount(api::SESSION.route, sessions::detail)
        .mount(api::PATCH_SESSION.route, sessions::patch)
        .mount(api::POST_MESSAGE.route, sessions::post_message)
        .mount(api::RELEASE.route, sessions::release)
        .mount(api::RETRY.route, sessions::retry)
        .mount(
            api::CANCEL_WAITING_RETRY.route,
            sessions::cancel_waiting_retry,
        )
        .mount(api::REGENERATE.route, sessions::regenerate)
        .mount(api::CANCEL_RUN.route, runs::cancel)
        .mount(api::DISMISS_RETRY.route, runs::dismiss_retry)
        .mount(api::EVENTS, sse::events)
        .mount(api::RUN.route, runs::detail)
        .mount(api::PROVIDERS.route, providers::list)
        .mount(api::CLEAR_COOLDOWN.route, providers::clear)
        .mount(api::CONFIG.route, client_config)
        .mount(api::TOOLS.route, tools)
        .fallback(|| async {
            error::respond(
                StatusCode::NOT_FOUND,
                ErrorCode::NotFound,
                "no such API route",
            )
        })
        .layer(middleware::from_fn_with_state(
            state.clone(),
            auth::require_operator,
        ))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES));

    let mcp = Router::new()
        .route_service("/mcp", mcp::service(state.engine.clone()))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            mcp::authenticate,
        ));

    let routes = generate_route_list(app::App);
    let leptos = state.leptos.clone();
    let mut router = Router::new().nest(app::api::PREFIX, api).merge(mcp);
    // The built-in demo endpoint exists only while the demo provider is in use.
    if state.config.provider == crate::config::ProviderKind::Demo {
        router = router.nest(
            "/demo/v1",
            crate::llm::demo::routes(std::time::Duration::from_millis(state.config.demo_delta_ms)),
        );
    }
    router
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

/// Mounts a handler at an endpoint of the table in `app::api`, with the endpoint's method.
trait Mount {
    fn mount<H: Handler<T, AppState>, T: 'static>(self, route: app::api::Route, handler: H)
        -> Self;
}

impl Mount for Router<AppState> {
    fn mount<H: Handler<T, AppState>, T: 'static>(
        self,
        route: app::api::Route,
        handler: H,
    ) -> Self {
        use app::api::Method;
        let filter = match route.method {
            Method::Get => MethodFilter::GET,
            Method::Post => MethodFilter::POST,
            Method::Patch => MethodFilter::PATCH,
            Method::Delete => MethodFilter::DELETE,
        };
        self.route(route.path, on(filter, handler))
    }
}

async fn client_config(State(state): State<AppState>) -> Json<ClientConfig> {
    let c = &state.config;
    Json(ClientConfig {
        tier2_base_ms: c.tier2_base_ms,
        tier2_cap_ms: c.tier2_cap_ms,
        tier1_max_attempts: c.tier1_max_attempts,
    })
}

/// `GET /tools`: every tool source, its status and its tools (never a server's env or
/// headers).
async fn tools(State(state): State<AppState>) -> Json<app::wire::ToolsResponse> {
    Json(app::wire::ToolsResponse {
        servers: state.engine.tools().servers(),
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
