//! A connected server served: its tools listed (every page, bounded) and re-listed when it
//! says they changed, an HTTP server pinged, until the connection ends or shutdown.
use super::Secrets;
use crate::mcp_client::call::made_by_transport;
use crate::mcp_client::{render, Slot};
use app::wire::ToolInfo;
use rmcp::model::{
    ClientCapabilities, ClientConfig, ClientRequest, Implementation, PaginatedRequestParams,
};
use rmcp::service::{NotificationContext, RunningService, ServiceError};
use rmcp::{ClientHandler, Peer, RoleClient};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

const LIST_TIMEOUT: Duration = Duration::from_secs(30);
const MAX_LIST_PAGES: usize = 32;
/// An HTTP server is pinged this often (a stdio server's end shows as the end of its output).
const PING_EVERY: Duration = Duration::from_secs(5);
const PING_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Clone)]
pub(super) struct Handler {
    pub(super) relist: Arc<Notify>,
}

impl ClientHandler for Handler {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.relist.notify_one();
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("mulligan", env!("CARGO_PKG_VERSION")),
        )
    }
}

/// Lists tools, marks the server ready, and serves until the connection ends or shutdown.
pub(super) async fn serve(
    slot: &Slot,
    running: RunningService<RoleClient, Handler>,
    relist: Arc<Notify>,
    pid: Option<u32>,
    secrets: &Secrets,
    shutdown: &CancellationToken,
) -> String {
    let peer = running.peer().clone();
    let stop = running.cancellation_token();
    let waiting = running.waiting();
    tokio::pin!(waiting);
    let listed = tokio::select! {
        r = list_tools(&peer, secrets) => r,
        _ = &mut waiting => return "the server closed the connection".into(),
        _ = shutdown.cancelled() => { stop.cancel(); return "stopped".into() }
    };
    match listed {
        Ok(tools) => {
            tracing::info!(server = %slot.name, tools = tools.len(), "MCP server ready");
            slot.set_ready(peer.clone(), tools, pid);
        }
        Err(e) => {
            stop.cancel();
            return format!("cannot list its tools: {e}");
        }
    }
    let mut ping = tokio::time::interval_at(tokio::time::Instant::now() + PING_EVERY, PING_EVERY);
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let pings = pid.is_none();
    loop {
        tokio::select! {
            _ = ping.tick(), if pings => {
                if let Err(e) = alive(&peer).await {
                    stop.cancel();
                    return e;
                }
            }
            quit = &mut waiting => {
                return match quit {
                    Ok(reason) => format!("the connection ended ({reason:?})"),
                    Err(_) => "the connection ended".into(),
                };
            }
            _ = relist.notified() => {
                match list_tools(&peer, secrets).await {
                    Ok(tools) => {
                        tracing::debug!(server = %slot.name, tools = tools.len(), "MCP tools re-listed");
                        slot.set_tools(tools);
                    }
                    Err(e) => tracing::warn!(server = %slot.name, error = %secrets.scrub(&e), "cannot re-list MCP tools"),
                }
            }
            _ = shutdown.cancelled() => {
                stop.cancel();
                return "stopped".into();
            }
        }
    }
}

/// Whether the server still answers a ping (any answer counts, even an error, except one the
/// transport made up because the connection failed).
async fn alive(peer: &Peer<RoleClient>) -> Result<(), String> {
    let ping = ClientRequest::PingRequest(Default::default());
    match tokio::time::timeout(PING_TIMEOUT, peer.send_request(ping)).await {
        Err(_) => Err(format!(
            "no answer to a ping within {} s",
            PING_TIMEOUT.as_secs()
        )),
        Ok(Ok(_)) => Ok(()),
        Ok(Err(ServiceError::McpError(e))) if !made_by_transport(&e) => Ok(()),
        Ok(Err(e)) => Err(format!("the server stopped answering: {e}")),
    }
}

/// Every page of the tool list, bounded in pages, tools and sizes.
async fn list_tools(peer: &Peer<RoleClient>, secrets: &Secrets) -> Result<Vec<ToolInfo>, String> {
    let no_tools = peer
        .peer_info()
        .is_some_and(|info| info.capabilities.tools.is_none());
    if no_tools {
        return Ok(Vec::new());
    }
    let mut all = Vec::new();
    let mut cursor = None;
    for _ in 0..MAX_LIST_PAGES {
        let params = PaginatedRequestParams::default().with_cursor(cursor);
        let page = tokio::time::timeout(LIST_TIMEOUT, peer.list_tools(Some(params)))
            .await
            .map_err(|_| {
                format!(
                    "no answer to tools/list within {} s",
                    LIST_TIMEOUT.as_secs()
                )
            })?
            .map_err(|e| e.to_string())?;
        all.extend(page.tools);
        cursor = page.next_cursor;
        if cursor.is_none() || all.len() > render::MAX_TOOLS {
            break;
        }
    }
    let (tools, skipped) = render::tools(all, &secrets.0);
    if skipped > 0 {
        tracing::warn!(
            skipped,
            "MCP tools left out (too many, names or schemas too long, or duplicates)"
        );
    }
    Ok(tools)
}
