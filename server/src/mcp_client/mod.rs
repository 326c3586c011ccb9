//! The configured MCP servers (CONTRACT §6 "Tool sources"): kept connected in the background,
//! their tools listed, and tool calls made with a timeout and cancellation.
pub mod config;
mod http;
mod render;
mod supervise;

pub use config::{load, parse, ConfigError, ServerSpec, TransportSpec};
pub use render::MAX_RESULT_BYTES;

use crate::redact::Redactor;
use app::wire::{ToolInfo, ToolServer, ToolServerStatus, ToolTransport};
use rmcp::model::{CallToolRequest, CallToolRequestParams, ClientRequest, ServerResult};
use rmcp::service::{PeerRequestOptions, ServiceError};
use rmcp::{Peer, RoleClient};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// How long the `notifications/cancelled` for an abandoned call may take to go out.
const CANCEL_SEND_WITHIN: Duration = Duration::from_millis(500);

/// How a tool call ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallEnd {
    /// The server answered; `is_error` is MCP's isError. `text`: the result's text content
    /// joined (other content described briefly; structured content as JSON if no text).
    Done { text: String, is_error: bool },
    /// Not sent: unknown server, server not ready/failed, unknown tool. `text` says what and
    /// what to do.
    NotSent { text: String },
    /// Sent, but no answer: timed out (after `timeout`), or the connection died mid-call.
    Lost { text: String },
    /// `cancel` fired while the call ran: MCP `notifications/cancelled` was sent for it.
    Cancelled,
}

impl CallEnd {
    /// This end with the secrets in its text replaced.
    fn redacted(self, r: &Redactor) -> CallEnd {
        match self {
            CallEnd::Done { text, is_error } => CallEnd::Done {
                text: r.redact_owned(text),
                is_error,
            },
            CallEnd::NotSent { text } => CallEnd::NotSent {
                text: r.redact_owned(text),
            },
            CallEnd::Lost { text } => CallEnd::Lost {
                text: r.redact_owned(text),
            },
            CallEnd::Cancelled => CallEnd::Cancelled,
        }
    }
}

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

    /// Calls one tool. Never panics, never returns Err: every failure is a [`CallEnd`]. Its
    /// text holds no configured secret.
    pub async fn call(
        &self,
        server: &str,
        tool: &str,
        arguments: serde_json::Map<String, serde_json::Value>,
        timeout: Duration,
        cancel: &CancellationToken,
    ) -> CallEnd {
        let end = self
            .call_as_sent(server, tool, arguments, timeout, cancel)
            .await;
        end.redacted(&self.inner.redactor)
    }

    async fn call_as_sent(
        &self,
        server: &str,
        tool: &str,
        arguments: serde_json::Map<String, serde_json::Value>,
        timeout: Duration,
        cancel: &CancellationToken,
    ) -> CallEnd {
        let Some(slot) = self.slot(server) else {
            let names = self.names();
            let known = if names.is_empty() {
                "none is configured".to_string()
            } else {
                format!("configured: {}", names.join(", "))
            };
            return CallEnd::NotSent {
                text: format!(
                    "There is no MCP server named \"{}\" ({known}). Use one of the tools \
                     offered.",
                    render::prefix(server, 64)
                ),
            };
        };
        let (peer, tools) = {
            let s = slot.lock();
            match (&s.peer, s.status) {
                (Some(peer), Some(ToolServerStatus::Ready)) => (peer.clone(), s.tools.clone()),
                _ => {
                    let why = s.error.as_deref().unwrap_or("it is still starting");
                    return CallEnd::NotSent {
                        text: format!(
                            "The MCP server \"{server}\" is not available ({why}). The tool \
                             was not called; try again later or do without it."
                        ),
                    };
                }
            }
        };
        if !tools.iter().any(|t| t.name == tool) {
            let mut names: Vec<&str> = tools.iter().take(30).map(|t| t.name.as_str()).collect();
            if tools.len() > names.len() {
                names.push("…");
            }
            return CallEnd::NotSent {
                text: format!(
                    "The MCP server \"{server}\" has no tool \"{}\". Its tools: {}.",
                    render::prefix(tool, 128),
                    if names.is_empty() {
                        "none".to_string()
                    } else {
                        names.join(", ")
                    }
                ),
            };
        }
        if cancel.is_cancelled() {
            return CallEnd::Cancelled;
        }
        call_peer(&peer, server, tool, arguments, timeout, cancel).await
    }
}

async fn call_peer(
    peer: &Peer<RoleClient>,
    server: &str,
    tool: &str,
    arguments: serde_json::Map<String, serde_json::Value>,
    timeout: Duration,
    cancel: &CancellationToken,
) -> CallEnd {
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(
        CallToolRequestParams::new(tool.to_string()).with_arguments(arguments),
    ));
    let mut handle = match peer
        .send_cancellable_request(request, PeerRequestOptions::no_options())
        .await
    {
        Ok(handle) => handle,
        Err(e) => {
            return CallEnd::NotSent {
                text: format!(
                    "The MCP server \"{server}\" could not be reached ({e}). The tool was not \
                     called; try again later."
                ),
            }
        }
    };
    enum Ended {
        Answer(Box<Answer>),
        Timeout,
        Cancel,
    }
    let ended = tokio::select! {
        r = &mut handle.rx => Ended::Answer(Box::new(r)),
        _ = tokio::time::sleep(timeout) => Ended::Timeout,
        _ = cancel.cancelled() => Ended::Cancel,
    };
    match ended {
        Ended::Answer(answer) => answered(server, *answer),
        Ended::Timeout => {
            let _ =
                tokio::time::timeout(CANCEL_SEND_WITHIN, handle.cancel(Some("timed out".into())))
                    .await;
            CallEnd::Lost {
                text: format!(
                    "The tool gave no answer within {} s and was cancelled; whether it did its \
                     work is unknown: check before calling it again.",
                    timeout.as_secs_f64()
                ),
            }
        }
        Ended::Cancel => {
            let _ = tokio::time::timeout(
                CANCEL_SEND_WITHIN,
                handle.cancel(Some("cancelled by the user".into())),
            )
            .await;
            CallEnd::Cancelled
        }
    }
}

type Answer = Result<Result<ServerResult, ServiceError>, tokio::sync::oneshot::error::RecvError>;

/// What a call's answer (or the lack of one) means.
fn answered(server: &str, answer: Answer) -> CallEnd {
    match answer {
        Ok(Ok(ServerResult::CallToolResult(result))) => CallEnd::Done {
            text: render::result_text(&result),
            is_error: result.is_error.unwrap_or(false),
        },
        Ok(Ok(ServerResult::EmptyResult(_))) => CallEnd::Done {
            text: String::new(),
            is_error: false,
        },
        Ok(Ok(_)) => CallEnd::Done {
            text: format!(
                "The MCP server \"{server}\" answered with something other than a tool result \
                 (input requests and tasks are not supported)."
            ),
            is_error: true,
        },
        Ok(Err(ServiceError::McpError(e))) if made_by_transport(&e) => CallEnd::Lost {
            text: format!(
                "The connection to the MCP server \"{server}\" failed during the call ({}); \
                 whether the tool did its work is unknown: check before calling it again.",
                render::prefix(&e.message, 300)
            ),
        },
        Ok(Err(ServiceError::McpError(e))) => CallEnd::Done {
            text: render::cap(
                format!("MCP error {}: {}", e.code.0, e.message),
                MAX_RESULT_BYTES,
            ),
            is_error: true,
        },
        Ok(Err(e)) => CallEnd::Lost {
            text: format!(
                "The call to \"{server}\" got no answer ({e}); whether the tool did its work is \
                 unknown: check before calling it again."
            ),
        },
        Err(_) => CallEnd::Lost {
            text: format!(
                "The connection to the MCP server \"{server}\" ended during the call; whether \
                 the tool did its work is unknown: check before calling it again."
            ),
        },
    }
}

/// rmcp answers a request whose connection failed with an error marked like this.
pub(crate) fn made_by_transport(e: &rmcp::ErrorData) -> bool {
    e.data
        .as_ref()
        .and_then(|d| d.get("io.modelcontextprotocol/transportClosed"))
        .is_some()
}
