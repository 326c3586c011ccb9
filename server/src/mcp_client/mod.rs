//! The configured MCP servers (CONTRACT §6 "Tool sources"): kept connected in the background,
//! their tools listed, and tool calls made with a timeout and cancellation.
mod call;
pub mod config;
mod http;
mod render;
mod supervise;

pub use call::CallEnd;
pub use config::{load, parse, ConfigError, ServerSpec, TransportSpec};
pub use render::MAX_RESULT_BYTES;

use crate::redact::Redactor;
use app::wire::{ToolInfo, ToolServer, ToolServerStatus, ToolTransport};
use rmcp::{Peer, RoleClient};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// The configured MCP servers. Cheap to clone.
#[derive(Clone)]
pub struct McpServers {
    inner: Arc<Inner>,
}

struct Inner {
    slots: Vec<Arc<Slot>>,
    changed: Arc<watch::Sender<u64>>,
    /// Applied to every call's answer: a tool server may echo a secret.
    redactor: Redactor,
}

/// One server's live state.
pub(crate) struct Slot {
    name: String,
    transport: ToolTransport,
    state: Mutex<State>,
    changed: Arc<watch::Sender<u64>>,
}

#[derive(Default)]
struct State {
    status: Option<ToolServerStatus>,
    error: Option<String>,
    tools: Arc<Vec<ToolInfo>>,
    peer: Option<Peer<RoleClient>>,
    pid: Option<u32>,
}

impl Slot {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn update(&self, f: impl FnOnce(&mut State)) {
        f(&mut self.lock());
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    fn status(&self) -> ToolServerStatus {
        self.lock().status.unwrap_or(ToolServerStatus::Starting)
    }

    pub(crate) fn set_ready(&self, peer: Peer<RoleClient>, tools: Vec<ToolInfo>, pid: Option<u32>) {
        self.update(|s| {
            s.status = Some(ToolServerStatus::Ready);
            s.error = None;
            s.tools = Arc::new(tools);
            s.peer = Some(peer);
            s.pid = pid;
        });
    }

    pub(crate) fn set_tools(&self, tools: Vec<ToolInfo>) {
        self.update(|s| s.tools = Arc::new(tools));
    }

    pub(crate) fn set_failed(&self, error: String) {
        self.update(|s| {
            s.status = Some(ToolServerStatus::Failed);
            s.error = Some(error);
            s.peer = None;
            s.pid = None;
        });
    }
}

impl McpServers {
    /// Starts every server in the background (returns at once); each is restarted with backoff
    /// (1 s doubling to 60 s) when it dies or fails to start; tools are listed on connect and
    /// re-listed on `notifications/tools/list_changed`. Ends all children when `shutdown`
    /// fires. Every text a server sends passes `redactor` (and its own secrets) before it is
    /// shown, logged or answered. Needs a Tokio runtime.
    pub fn start(
        specs: Vec<ServerSpec>,
        redactor: Redactor,
        shutdown: CancellationToken,
    ) -> McpServers {
        let changed = Arc::new(watch::Sender::new(0u64));
        let mut slots = Vec::with_capacity(specs.len());
        for spec in specs {
            let slot = Arc::new(Slot {
                name: spec.name.clone(),
                transport: spec.transport.wire(),
                state: Mutex::new(State::default()),
                changed: changed.clone(),
            });
            tokio::spawn(supervise::run(
                slot.clone(),
                spec.transport,
                redactor.clone(),
                shutdown.clone(),
            ));
            slots.push(slot);
        }
        McpServers {
            inner: Arc::new(Inner {
                slots,
                changed,
                redactor,
            }),
        }
    }

    /// No servers.
    pub fn empty() -> McpServers {
        McpServers {
            inner: Arc::new(Inner {
                slots: Vec::new(),
                changed: Arc::new(watch::Sender::new(0)),
                redactor: Redactor::default(),
            }),
        }
    }

    /// Snapshot for `GET /tools`, in config order.
    pub fn servers(&self) -> Vec<ToolServer> {
        self.inner
            .slots
            .iter()
            .map(|slot| {
                let s = slot.lock();
                ToolServer {
                    name: slot.name.clone(),
                    transport: slot.transport,
                    status: s.status.unwrap_or(ToolServerStatus::Starting),
                    error: s.error.clone(),
                    tools: s.tools.as_ref().clone(),
                }
            })
            .collect()
    }

    /// Calls `f` with each ready server's name and tool list (shared, not copied), in config
    /// order.
    pub fn each_ready(&self, mut f: impl FnMut(&str, &Arc<Vec<ToolInfo>>)) {
        for slot in &self.inner.slots {
            let s = slot.lock();
            if s.status == Some(ToolServerStatus::Ready) {
                f(&slot.name, &s.tools);
            }
        }
    }

    /// The configured server names, in config order.
    pub fn names(&self) -> Vec<String> {
        self.inner.slots.iter().map(|s| s.name.clone()).collect()
    }

    /// The process id of a stdio server's current child, while it is ready (for diagnostics).
    pub fn pid(&self, server: &str) -> Option<u32> {
        self.slot(server).and_then(|s| s.lock().pid)
    }

    /// Waits until every server is ready or failed, or `within` passes (for tests and
    /// startup logs).
    pub async fn settled(&self, within: Duration) {
        let deadline = tokio::time::Instant::now() + within;
        let mut rx = self.inner.changed.subscribe();
        loop {
            let settled = self
                .inner
                .slots
                .iter()
                .all(|s| s.status() != ToolServerStatus::Starting);
            if settled {
                return;
            }
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => {}
                _ => return,
            }
        }
    }

    /// Waits until `f` holds for the server snapshot, or `within` passes; says whether it held.
    pub async fn wait_until(&self, within: Duration, f: impl Fn(&[ToolServer]) -> bool) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        let mut rx = self.inner.changed.subscribe();
        loop {
            if f(&self.servers()) {
                return true;
            }
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => {}
                _ => return f(&self.servers()),
            }
        }
    }

    /// Of the servers named in `names`, those still starting, in config order.
    pub fn starting(&self, names: &[String]) -> Vec<String> {
        self.inner
            .slots
            .iter()
            .filter(|s| names.contains(&s.name) && s.status() == ToolServerStatus::Starting)
            .map(|s| s.name.clone())
            .collect()
    }

    /// Waits until none of the servers named in `names` is still starting (each is ready or
    /// failed), or `within` passes; answers those still starting then.
    pub async fn started(&self, names: &[String], within: Duration) -> Vec<String> {
        let deadline = tokio::time::Instant::now() + within;
        let mut rx = self.inner.changed.subscribe();
        loop {
            let starting = self.starting(names);
            if starting.is_empty() {
                return starting;
            }
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => {}
                _ => return self.starting(names),
            }
        }
    }

    fn slot(&self, name: &str) -> Option<&Arc<Slot>> {
        self.inner.slots.iter().find(|s| s.name == name)
    }
}
