//! Mulligan's server: configuration, store, run engine, providers and the HTTP surface.
pub mod acp_client;
pub mod approval;
pub mod child_env;
pub mod clock;
pub mod config;
pub mod engine;
pub mod error;
pub mod events;
pub mod http;
pub mod llm;
pub mod mcp_client;
pub mod metrics;
pub mod providers;
pub mod redact;
pub mod retry;
pub mod run;
pub mod secrets;
pub mod site;
pub mod sse_lines;
mod start_error;
pub mod store;
pub mod tools;
pub mod wake;

use config::Config;
use engine::{Engine, EngineConfig};
use events::EventHub;
pub use start_error::StartError;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;

/// A running server: its address, operator token, and how to stop it.
pub struct Running {
    pub addr: SocketAddr,
    pub token: String,
    stop: tokio_util::sync::CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    /// `http://host:port/?token=…`, the URL to open.
    pub fn open_url(&self) -> String {
        format!("http://{}/?token={}", self.addr, self.token)
    }

    /// Stops accepting, records running runs as interrupted, flushes the event log.
    pub async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }

    /// Waits until the server ends (after a signal).
    pub async fn wait(self) {
        let _ = self.task.await;
    }
}

/// Opens the store, recovers runs a stop interrupted, binds and serves until stopped
/// (by [`Running::stop`] or Ctrl-C/SIGTERM when `signals`). Each part is made by its own
/// function below, in the order they depend on each other.
pub async fn start(config: Config, signals: bool) -> Result<Running, StartError> {
    config.check().map_err(StartError::Setting)?;
    let token = data_dir_and_token(&config)?;
    let instance = clock::new_id("i");
    let store = store::Store::open_with(
        &config.database_url(),
        config.database_max_connections,
        &format!("mulligan {instance}"),
    )
    .await?;
    let (hub, writer) = EventHub::start(store.clone()).await?;
    let (listener, addr) = bind(&config).await?;
    let mcp_specs = mcp_specs(&config)?;
    let catalogued = catalogue(&config)?;
    let default_model = catalogued.default_model(&config);
    let serve_demo = catalogued.serves_demo();
    let redactor = redactor(&config, &token, &catalogued, &mcp_specs);
    let cooldowns: Arc<dyn retry::cooldown::Table> = Arc::new(store.clone());
    let providers = providers::setup::providers(
        &config,
        catalogued,
        addr,
        cooldowns.clone(),
        redactor.clone(),
    );
    let tools_stop = tokio_util::sync::CancellationToken::new();
    let toolbox = toolbox(mcp_specs, redactor, tools_stop.clone());
    let engine = Engine::new(
        store.clone(),
        hub,
        providers,
        toolbox,
        EngineConfig::from_settings(&config, instance, default_model),
    );
    engine.begin().await?;
    let app = http::router(http::AppState {
        engine: engine.clone(),
        cooldowns,
        leptos: leptos_options(&config, addr),
        config: Arc::new(config),
        token: token.clone().into(),
        serve_demo,
        readiness: Default::default(),
    });
    let stop = tokio_util::sync::CancellationToken::new();
    let shutdown = async move {
        // Runs end first (recorded, event log flushed), then SSE streams close, so the
        // graceful shutdown of the HTTP server can finish.
        engine.shutdown().await;
        tools_stop.cancel();
        engine.hub().close_streams();
    };
    let task = tokio::spawn(serve(
        listener,
        app,
        stop.clone(),
        signals,
        shutdown,
        writer,
        store,
    ));
    Ok(Running {
        addr,
        token,
        stop,
        task,
    })
}

/// The data directory, made if missing, and the operator's token (chosen, or kept there).
fn data_dir_and_token(config: &Config) -> Result<String, StartError> {
    if let Some(t) = config.token.as_deref().filter(|t| !t.is_empty()) {
        http::auth::check_chosen_token(t).map_err(StartError::Token)?;
    }
    let dir = || config.data_dir.clone();
    http::auth::create_data_dir(&config.data_dir)
        .map_err(|source| StartError::DataDir { dir: dir(), source })?;
    http::auth::load_or_create_token(config.token.as_deref(), &config.data_dir)
        .map_err(|source| StartError::TokenFile { dir: dir(), source })
}

/// The listening socket and the address it got.
async fn bind(config: &Config) -> Result<(TcpListener, SocketAddr), StartError> {
    let listen = |source| StartError::Listen {
        addr: config.bind,
        source,
    };
    let listener = TcpListener::bind(config.bind).await.map_err(listen)?;
    let addr = listener.local_addr().map_err(listen)?;
    Ok((listener, addr))
}

/// The MCP servers' specs from their file: a bad file stops the start with its error.
fn mcp_specs(config: &Config) -> Result<Vec<mcp_client::ServerSpec>, StartError> {
    match &config.mcp_config {
        Some(path) => mcp_client::load(path).map_err(|source| StartError::McpConfig {
            path: path.clone(),
            source,
        }),
        None => Ok(Vec::new()),
    }
}

/// The providers' catalogue (its file, or the built-in demo chain).
fn catalogue(config: &Config) -> Result<providers::setup::Catalogued, StartError> {
    providers::setup::catalogue(config).map_err(|message| StartError::Providers {
        path: config.providers.clone().unwrap_or_default(),
        message,
    })
}

/// What providers and tool servers send passes this before it is stored, logged or sent to
/// a model: it knows the providers' keys, the API key, the operator token and the tool
/// servers' secrets.
fn redactor(
    config: &Config,
    token: &str,
    catalogued: &providers::setup::Catalogued,
    mcp_specs: &[mcp_client::ServerSpec],
) -> redact::Redactor {
    redact::Redactor::new(
        catalogued
            .secrets()
            .chain(config.api_key.iter().cloned())
            .chain(std::iter::once(token.to_owned()))
            .chain(mcp_specs.iter().flat_map(|s| s.transport.secrets()))
            .collect::<Vec<_>>(),
    )
}

/// Every tool source: the MCP servers (started in the background, stopped by `stop`), the
/// built-in tools, and each server's approval rule.
fn toolbox(
    specs: Vec<mcp_client::ServerSpec>,
    redactor: redact::Redactor,
    stop: tokio_util::sync::CancellationToken,
) -> tools::Toolbox {
    let rules = specs
        .iter()
        .map(|s| (s.name.clone(), s.approval.clone()))
        .collect();
    tools::Toolbox::new(
        mcp_client::McpServers::start(specs, redactor, stop),
        tools::builtin::infos(),
    )
    .with_rules(rules)
}

/// Where the page's site (bundle, styles) is served from.
fn leptos_options(config: &Config, addr: SocketAddr) -> leptos::prelude::LeptosOptions {
    let site_root = match &config.site_root {
        Some(dir) => dir.to_string_lossy().into_owned(),
        None => site::DEFAULT_ROOT.to_string(),
    };
    leptos::prelude::LeptosOptions::builder()
        .output_name(site::OUTPUT_NAME)
        .site_root(site_root)
        .site_pkg_dir(site::PKG_DIR)
        .site_addr(addr)
        .build()
}

/// Serves `app` until `stop` (or a signal, with `signals`), then runs `shutdown`, lets the
/// open connections finish, stops the event log's writer and closes the store.
async fn serve(
    listener: TcpListener,
    app: axum::Router,
    stop: tokio_util::sync::CancellationToken,
    signals: bool,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    writer: tokio::task::JoinHandle<()>,
    store: store::Store,
) {
    let graceful = async move {
        if signals {
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = shutdown_signal() => {}
            }
        } else {
            stop.cancelled().await
        }
        tracing::info!("stopping: running runs are recorded as interrupted");
        shutdown.await;
    };
    // Each event is written as soon as it is ready: no Nagle delay waiting for the
    // client's ACK of the previous one (seen as ~40 ms on a stream's first turn).
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "could not set TCP_NODELAY");
        }
    });
    // `into_make_service`: each connection gets a clone of the router (one `Arc`). Served
    // as a plain `Router`, axum re-applies the state per connection, which deep-copies
    // every route's boxed services (heaptrack: ~40 KiB held per open connection).
    if let Err(e) = axum::serve(listener, app.into_make_service())
        .with_graceful_shutdown(graceful)
        .await
    {
        tracing::error!(error = %e, "the HTTP server failed");
    }
    writer.abort();
    store.close().await;
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        if let Ok(mut s) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            s.recv().await;
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
}
