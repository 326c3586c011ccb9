//! The run engine: a thin [`Engine`] over the parts that each own their state — the session
//! locks (`locks.rs`), the run lifecycle (`runs.rs`: the runs executing here, the tasks a
//! stop waits for), this instance's leases and the recovery of runs no task executes
//! (`lease.rs`), background retries and parking (`background.rs`), approval waits
//! (`approvals.rs`) and the session commands' defaults (`sessions.rs`) — and the commands
//! that go through them: dispatch (post a prompt → queued run), the per-session queue (one
//! active run per session), cancel, release, and restart recovery. Every decision about a
//! session's runs is taken under that session's lock (`SessionLocks::lock`) — in-process,
//! and on a shared database also a lock row across instances — which is what makes "one
//! active run per session", the claims and the ordering of queued prompts atomic. Each run
//! executes as a task of [`crate::run`], which the engine launches and whose end it records.
mod approvals;
mod background;
mod builtins;
mod cancel;
mod config;
mod dismiss;
mod dispatch;
mod finish;
mod lease;
mod locks;
mod parking;
mod queue;
mod reconcile;
mod recover;
mod runs;
mod sessions;
mod snapshot;

use crate::error::{Error, Kind, Result};
use crate::events::EventHub;
use crate::run::{RunContext, Saver};
use crate::store::Store;
use app::wire::SessionId;
use app::wire::{Event, MAX_CONTENT_CHARS};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

pub use crate::run::overlay_mirrored;
pub use approvals::{Deciding, DEFAULT_APPROVALS_PAGE, MAX_APPROVALS_LISTED};
pub use config::EngineConfig;
pub use locks::{LOCK_WAIT, LOOP_LOCK_WAIT};

/// The engine the HTTP API, the CLI's server and MCP call: a cheap handle on its parts.
#[derive(Clone)]
pub struct Engine {
    parts: Arc<Parts>,
}

/// The engine's parts, each the owner of its own state; the commands go through them.
struct Parts {
    /// What its runs work with: the store, the event hub, the provider, the tools.
    run: Arc<RunContext>,
    /// The session locks, in this process and across instances.
    locks: locks::SessionLocks,
    /// The run lifecycle: the runs executing here, the tasks a stop waits for.
    runs: runs::Runs,
    /// This instance's lease on its runs, and their reconcile.
    leases: lease::Leases,
    /// Background retries and parking: their policies, their loop's wake.
    retries: background::Retries,
    /// How long a tool call waits for the operator's decision.
    approvals: approvals::Waits,
    /// What a new session gets when it asks for nothing.
    sessions: sessions::Defaults,
}

impl Engine {
    /// Starts the engine's work on this instance: the first heartbeat before any recovered
    /// run starts (so no other instance takes those runs for orphans of a dead one), the
    /// recovery of runs a stop interrupted, then its loops (reconcile, background retries,
    /// the queue's pump, approval timeouts).
    pub async fn begin(&self) -> Result<()> {
        self.keep_leases().await?;
        self.recover().await?;
        self.reconcile_periodically();
        self.fire_background_retries();
        self.pump_periodically();
        self.time_out_approvals_periodically();
        Ok(())
    }

    /// The engine over `store`, `hub`, `providers` and `tools`, each part given its share
    /// of `cfg`.
    pub fn new(
        store: Store,
        hub: EventHub,
        providers: crate::providers::Providers,
        tools: crate::tools::Toolbox,
        cfg: EngineConfig,
    ) -> Engine {
        let EngineConfig {
            instance,
            default_model,
            background,
            parking,
            reconcile_every,
            approval_timeout,
            run,
        } = cfg;
        let stopping = CancellationToken::new();
        let parts = Parts {
            locks: locks::SessionLocks::new(store.clone(), hub.clone()),
            runs: runs::Runs::new(stopping.clone()),
            leases: lease::Leases::new(store.clone(), instance, reconcile_every),
            retries: background::Retries::new(background, parking),
            approvals: approvals::Waits::new(approval_timeout),
            sessions: sessions::Defaults { default_model },
            run: Arc::new(RunContext {
                saver: Saver::start(store.clone()),
                store,
                hub,
                provider: providers.send,
                models: providers.models,
                agents: providers.agents,
                tools,
                cfg: run,
                stopping,
                decided: Default::default(),
            }),
        };
        Engine {
            parts: Arc::new(parts),
        }
    }

    /// What the engine's runs work with.
    fn context(&self) -> &Arc<RunContext> {
        &self.parts.run
    }

    pub fn store(&self) -> &Store {
        &self.parts.run.store
    }

    pub fn hub(&self) -> &EventHub {
        &self.parts.run.hub
    }

    /// The session locks.
    fn locks(&self) -> &locks::SessionLocks {
        &self.parts.locks
    }

    /// This instance's lease on its runs.
    fn leases(&self) -> &lease::Leases {
        &self.parts.leases
    }

    /// Background retries' and parking's own state.
    fn retries(&self) -> &background::Retries {
        &self.parts.retries
    }

    /// Approval waits' own state.
    fn approval_waits(&self) -> &approvals::Waits {
        &self.parts.approvals
    }

    /// The session commands' own state.
    fn session_defaults(&self) -> &sessions::Defaults {
        &self.parts.sessions
    }

    /// The run lifecycle's own state.
    fn runs(&self) -> &runs::Runs {
        &self.parts.runs
    }

    /// The tool sources of agent turns.
    pub fn tools(&self) -> &crate::tools::Toolbox {
        &self.parts.run.tools
    }

    /// The models the server can call: the catalogue, cooldowns, which take tools.
    pub fn models(&self) -> &crate::providers::models::Models {
        &self.parts.run.models
    }

    /// Runs `tick` every `period` until the server stops; a failed tick is logged
    /// (`failed` says what did not happen) and the next one tries again.
    fn every(
        &self,
        period: Duration,
        failed: &'static str,
        tick: impl Fn(Engine) -> futures::future::BoxFuture<'static, Result<()>> + Send + 'static,
    ) {
        let engine = self.clone();
        tokio::spawn(async move {
            let mut timer = tokio::time::interval(period);
            timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = engine.runs().stopping().cancelled() => return,
                    _ = timer.tick() => {}
                }
                if let Err(e) = tick(engine.clone()).await {
                    tracing::warn!(error = %e, "{failed}; trying again");
                }
            }
        });
    }

    /// This instance's id.
    pub fn instance(&self) -> &str {
        self.leases().instance()
    }

    fn publish(&self, session_id: &SessionId, event: Event) {
        self.hub().publish(session_id, &event);
    }

    /// Stops every run here (recorded `failed`/`interrupted`, partial text kept) and waits
    /// until the run tasks and the event log are done.
    pub async fn shutdown(&self) {
        self.runs().stop().await;
        self.hub().flush().await;
        if let Err(e) = self.store().retire(self.leases().instance()).await {
            tracing::warn!(error = %e, "could not retire this instance");
        }
    }
}

/// The contract's content rule: 1..=100,000 chars after trim.
pub(crate) fn validate_content(content: &str) -> Result<&str> {
    let trimmed = content.trim();
    if trimmed.is_empty() {
        return Err(Error::invalid("content is empty: write a message"));
    }
    let n = trimmed.chars().count();
    if n > MAX_CONTENT_CHARS {
        return Err(Error::new(
            Kind::Invalid,
            format!("content is {n} characters; the limit is {MAX_CONTENT_CHARS}"),
        ));
    }
    Ok(trimmed)
}

/// A request's `from`, when given, must be a browser tab's id ([`app::wire::is_tab_id`]).
pub(crate) fn check_tab_id(from: Option<&str>) -> Result<()> {
    if from.is_some_and(|f| !app::wire::is_tab_id(f)) {
        return Err(Error::invalid(
            "`from` is a browser tab's id: `tab-` and 1 to 32 lowercase letters, digits or dashes",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
