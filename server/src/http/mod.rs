//! The HTTP surface: `/api/v1` (CONTRACT §2), `/mcp` (§5, see [`mcp`]), `/healthz`,
//! `/metrics`, the demo provider's endpoint and the server-rendered Leptos app. Handlers parse,
//! call the engine, map to the contract.
mod approvals;
pub mod auth;
pub mod error;
pub mod mcp;
pub mod openapi;
mod page;
mod providers;
pub mod ready;
mod runs;
mod sessions;
mod span;
mod sse;

pub use sessions::hex_sha256;

use crate::config::Config;
use crate::engine::Engine;
use app::api::{self, Method, Route};
use app::wire::{ClientConfig, MAX_BODY_BYTES};
use axum::extract::{DefaultBodyLimit, FromRef, State};
use axum::handler::Handler;
use axum::routing::{any, get, on, MethodFilter, MethodRouter};
use axum::{middleware, Json, Router};
use leptos::prelude::LeptosOptions;
use leptos_axum::LeptosRoutes;
use std::sync::Arc;

#[derive(Clone)]
pub struct AppState {
    pub engine: Engine,
    /// The provider-wide cooldowns (the provider's gate applies them).
    pub cooldowns: Arc<dyn crate::retry::cooldown::Table>,
    pub config: Arc<Config>,
    pub token: Arc<str>,
    pub leptos: LeptosOptions,
    /// Whether `/demo/v1` is served (the catalogue has the demo entry).
    pub serve_demo: bool,
    /// `/readyz`'s latest check.
    pub readiness: Arc<ready::Readiness>,
}

impl FromRef<AppState> for LeptosOptions {
    fn from_ref(s: &AppState) -> Self {
        s.leptos.clone()
    }
}

/// Every `/api/v1` route with its handler: the endpoint table in `app::api`, mounted.
fn api_routes() -> Vec<(Route, MethodRouter<AppState>)> {
    vec![
        at(api::CREATE_SESSION.route, sessions::create),
        at(api::LIST_SESSIONS.route, sessions::list),
        at(api::SESSION.route, sessions::detail),
        at(api::PATCH_SESSION.route, sessions::patch),
        at(api::POST_MESSAGE.route, sessions::post_message),
        at(api::RELEASE.route, sessions::release),
        at(api::RETRY.route, sessions::retry),
        at(
            api::CANCEL_WAITING_RETRY.route,
            sessions::cancel_waiting_retry,
        ),
        at(api::REGENERATE.route, sessions::regenerate),
        at(api::CANCEL_RUN.route, runs::cancel),
        at(api::DISMISS_RETRY.route, runs::dismiss_retry),
        at(api::EVENTS, sse::events),
        at(api::FOLLOW, sse::follow),
        at(api::RUN.route, runs::detail),
        at(api::DECIDE_TOOL_CALL.route, approvals::decide),
        at(api::APPROVALS.route, approvals::list),
        at(api::PROVIDERS.route, providers::list),
        at(api::CLEAR_COOLDOWN.route, providers::clear),
        at(api::MODELS.route, providers::models),
        at(api::CONFIG.route, client_config),
        at(api::TOOLS.route, tools),
        at(api::OPENAPI, openapi_document),
    ]
}

/// The routes mounted under [`api::PREFIX`], as the OpenAPI document must list them.
pub fn api_route_table() -> Vec<Route> {
    api_routes().into_iter().map(|(route, _)| route).collect()
}

pub fn router(state: AppState) -> Router {
    let api = api_routes()
        .into_iter()
        .fold(Router::new(), |api, (route, handler)| {
            api.route(route.path, handler)
        })
        // After the routes: it applies to the routes already added.
        .method_not_allowed_fallback(error::method_not_allowed)
        .fallback(error::no_such_route)
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

    // Server rendering spawns on Leptos' executor: tokio's (an error only if already set).
    let _ = any_spawner::Executor::init_tokio();
    // `nest` leaves the prefix with a trailing slash to the page fallback: it is the API's.
    let api_root = any(error::no_such_route).layer(middleware::from_fn_with_state(
        state.clone(),
        auth::require_operator,
    ));
    let mut router = Router::new()
        .nest(app::api::PREFIX, api)
        .route(&format!("{}/", app::api::PREFIX), api_root)
        .merge(mcp);
    // The built-in demo endpoint exists only while the demo provider is in use: no catalogue
    // file and `MULLIGAN_PROVIDER=demo`, or a file that names `demo`.
    if state.serve_demo {
        router = router.nest(
            "/demo/v1",
            crate::llm::demo::routes(std::time::Duration::from_millis(state.config.demo_delta_ms)),
        );
    }
    router
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        // Each of the app's routes (its own definition, read from `app::App`), rendered
        // with its first data (`page.rs`).
        .leptos_routes_with_handler(
            leptos_axum::generate_route_list(app::App),
            get(page::render),
        )
        .fallback(leptos_axum::file_and_error_handler_with_context::<
            AppState,
            _,
        >(page::secure, app::shell))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            auth::cookie_from_query,
        ))
        .layer(middleware::from_fn(span::request_span))
        .with_state(state)
}

/// A handler at a route of the table in `app::api`, with the route's method.
fn at<H: Handler<T, AppState>, T: 'static>(
    route: Route,
    handler: H,
) -> (Route, MethodRouter<AppState>) {
    let filter = match route.method {
        Method::Get => MethodFilter::GET,
        Method::Post => MethodFilter::POST,
        Method::Patch => MethodFilter::PATCH,
        Method::Delete => MethodFilter::DELETE,
    };
    (route, on(filter, handler))
}

/// `GET /openapi.json`: behind the operator token like the rest of `/api/v1`.
async fn openapi_document() -> impl axum::response::IntoResponse {
    static DOCUMENT: std::sync::LazyLock<String> = std::sync::LazyLock::new(openapi::json);
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        DOCUMENT.as_str(),
    )
}

async fn client_config(State(state): State<AppState>) -> Json<ClientConfig> {
    Json(client_config_of(&state.config))
}

/// The settings a page works with (`GET /config`, and the page's first data).
fn client_config_of(c: &Config) -> ClientConfig {
    ClientConfig {
        tier2_base_ms: c.tier2_base_ms,
        tier2_cap_ms: c.tier2_cap_ms,
        tier1_max_attempts: c.tier1_max_attempts,
    }
}

/// `GET /tools`: every tool source, its status and its tools (never a server's env or
/// headers).
async fn tools(State(state): State<AppState>) -> Json<app::wire::ToolsResponse> {
    Json(app::wire::ToolsResponse {
        servers: state.engine.tools().servers(),
    })
}

/// `/readyz`: without auth like `/healthz`; 200 while the database takes a write, 503
/// `database.unavailable` while it does not (see [`ready`]). `/healthz` is the process's
/// liveness alone.
async fn readyz(State(state): State<AppState>) -> axum::response::Response {
    use axum::response::IntoResponse;
    match state.readiness.check(state.engine.store()).await {
        Ok(()) => "ready".into_response(),
        Err(e) => e.into_response(),
    }
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
