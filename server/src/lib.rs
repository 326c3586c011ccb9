//! Mulligan's server: configuration, store, run engine, providers and the HTTP surface.
pub mod approval;
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
use std::time::Duration;
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
/// (by [`Running::stop`] or Ctrl-C/SIGTERM when `signals`).
pub async fn start(config: Config, signals: bool) -> Result<Running, StartError> {
    config.check().map_err(StartError::Setting)?;
    if let Some(t) = config.token.as_deref().filter(|t| !t.is_empty()) {
        http::auth::check_chosen_token(t).map_err(StartError::Token)?;
    }
    let dir = || config.data_dir.clone();
    http::auth::create_data_dir(&config.data_dir)
        .map_err(|source| StartError::DataDir { dir: dir(), source })?;
    let token = http::auth::load_or_create_token(config.token.as_deref(), &config.data_dir)
        .map_err(|source| StartError::TokenFile { dir: dir(), source })?;
    let instance = clock::new_id("i");
    let store = store::Store::open_with(
        &config.database_url(),
        config.database_max_connections,
        &format!("mulligan {instance}"),
    )
    .await?;
    let (hub, writer) = EventHub::start(store.clone()).await?;

    let listen = |source| StartError::Listen {
        addr: config.bind,
        source,
    };
    let listener = TcpListener::bind(config.bind).await.map_err(listen)?;
    let addr = listener.local_addr().map_err(listen)?;

    // MCP servers start in the background; a bad config file stops the start with its error.
    let mcp_specs = match &config.mcp_config {
        Some(path) => mcp_client::load(path).map_err(|source| StartError::McpConfig {
            path: path.clone(),
            source,
        })?,
        None => Vec::new(),
    };
    let catalogued = match providers::setup::catalogue(&config) {
        Ok(c) => c,
        Err(message) => {
            return Err(StartError::Providers {
                path: config.providers.clone().unwrap_or_default(),
                message,
            })
        }
    };
    let default_model = catalogued.default_model(&config);
    let serve_demo = catalogued.serves_demo();
    // What providers and tool servers send passes this before it is stored, logged or sent
    // to a model.
    let redactor = redact::Redactor::new(
        catalogued
            .secrets()
            .chain(config.api_key.iter().cloned())
            .chain(mcp_specs.iter().flat_map(|s| s.transport.secrets()))
            .collect::<Vec<_>>(),
    );
    let cooldowns: Arc<dyn retry::cooldown::Table> = Arc::new(store.clone());
    let providers = providers::setup::providers(
        &config,
        catalogued,
        addr,
        cooldowns.clone(),
        redactor.clone(),
    );
    let tools_stop = tokio_util::sync::CancellationToken::new();
    let rules = mcp_specs
        .iter()
        .map(|s| (s.name.clone(), s.approval.clone()))
        .collect();
    let toolbox = tools::Toolbox::new(
        mcp_client::McpServers::start(mcp_specs, redactor, tools_stop.clone()),
        tools::builtin::infos(),
    )
    .with_rules(rules);
    let engine = Engine::new(
        store.clone(),
        hub,
        providers,
        toolbox,
        EngineConfig {
            instance,
            default_model,
            background: app::wire::Backoff {
                base_ms: config.tier2_base_ms,
                cap_ms: config.tier2_cap_ms,
            },
            parking: retry::parking::Parking {
                probe: app::wire::Backoff {
                    base_ms: config.tier2_base_ms,
                    cap_ms: config.tier2_cap_ms,
                },
                release_per_s: config.release_per_s.max(1),
            },
            reconcile_every: Duration::from_millis(config.reconcile_ms.max(10)),
            approval_timeout: Duration::from_millis(config.approval_timeout_ms.max(1)),
            run: crate::run::RunConfig {
                stream_idle: Duration::from_millis(config.stream_idle_ms),
                save_every: Duration::from_millis(250),
                delta_window: Duration::from_millis(config.delta_window_ms.min(1000)),
                tier1: retry::policy::Policy {
                    max_attempts: config.tier1_max_attempts.max(1),
                    base: Duration::from_millis(config.tier1_base_ms),
                    cap: Duration::from_millis(config.tier1_cap_ms),
                },
                spend_limit_tokens: config.spend_limit_tokens,
                context_tokens: config.context_tokens,
                max_reply_bytes: config.max_reply_bytes,
                max_run: Duration::from_millis(config.max_run_ms.max(1)),
                max_steps: config.max_steps.max(1),
                tool_timeout: Duration::from_millis(config.tool_timeout_ms.max(1)),
            },
        },
    );
    // The first heartbeat goes out before any recovered run starts, so no other instance
    // takes those runs for orphans of a dead one.
    engine.keep_leases().await?;
    engine.recover().await?;
    engine.reconcile_periodically();
    engine.fire_background_retries();
    engine.pump_periodically();
    engine.time_out_approvals_periodically();

    let site_root = match &config.site_root {
        Some(dir) => dir.to_string_lossy().into_owned(),
        None => site::DEFAULT_ROOT.to_string(),
    };
    let leptos = leptos::prelude::LeptosOptions::builder()
        .output_name(site::OUTPUT_NAME)
        .site_root(site_root)
        .site_pkg_dir(site::PKG_DIR)
        .site_addr(addr)
        .build();
    let state = http::AppState {
        engine: engine.clone(),
        cooldowns,
        config: Arc::new(config),
        token: token.clone().into(),
        leptos,
        serve_demo,
    };
    let app = http::router(state);
    let stop = tokio_util::sync::CancellationToken::new();
    let stopped = stop.clone();
    let task = tokio::spawn(async move {
        let shutdown = async move {
            if signals {
                tokio::select! {
                    _ = stopped.cancelled() => {}
                    _ = shutdown_signal() => {}
                }
            } else {
                stopped.cancelled().await
            }
            tracing::info!("stopping: running runs are recorded as interrupted");
            // Runs end first (recorded, event log flushed), then SSE streams close, so the
            // graceful shutdown of the HTTP server can finish.
            engine.shutdown().await;
            tools_stop.cancel();
            engine.hub().close_streams();
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
            .with_graceful_shutdown(shutdown)
            .await
        {
            tracing::error!(error = %e, "the HTTP server failed");
        }
        writer.abort();
        store.close().await;
    });
    Ok(Running {
        addr,
        token,
        stop,
        task,
    })
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
