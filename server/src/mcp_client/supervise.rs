//! Keeps one MCP server connected: starts it, lists its tools, re-lists them when told,
//! restarts it with backoff when it dies, and ends it on shutdown.
use super::config::{redact_url, TransportSpec};
use super::http::Http;
use super::{render, Slot};
use crate::redact::Redactor;
use app::wire::ToolInfo;
use rmcp::model::{
    ClientCapabilities, ClientConfig, ClientRequest, Implementation, PaginatedRequestParams,
};
use rmcp::service::{NotificationContext, RunningService, ServiceError};
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientHandler, Peer, RoleClient, ServiceExt};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::AsyncReadExt;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

const BACKOFF_START: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(60);
/// A server up this long counts as healthy: its next restart waits [`BACKOFF_START`] again.
const HEALTHY_AFTER: Duration = Duration::from_secs(60);
/// Starting, initializing and the first listing must finish within this.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
const LIST_TIMEOUT: Duration = Duration::from_secs(30);
const MAX_LIST_PAGES: usize = 32;
/// One JSON-RPC message from a server (a line on stdio, a body or SSE event over HTTP).
const MAX_MESSAGE_BYTES: usize = 8 * 1024 * 1024;
const MAX_STDERR_LINE: usize = 1024;
const MAX_ERROR_CHARS: usize = 600;
/// An HTTP server is pinged this often (a stdio server's end shows as the end of its output).
const PING_EVERY: Duration = Duration::from_secs(5);
const PING_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Clone)]
struct Handler {
    relist: Arc<Notify>,
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

/// Runs until `shutdown` fires.
pub(super) async fn run(
    slot: Arc<Slot>,
    spec: TransportSpec,
    redactor: Redactor,
    shutdown: CancellationToken,
) {
    let secrets = Secrets::of(&spec, &redactor);
    let mut backoff = BACKOFF_START;
    loop {
        let began = Instant::now();
        let reason = connect_and_serve(&slot, &spec, &secrets, &shutdown).await;
        if shutdown.is_cancelled() {
            return;
        }
        if began.elapsed() >= HEALTHY_AFTER {
            backoff = BACKOFF_START;
        }
        let reason = secrets.scrub(&reason);
        tracing::warn!(server = %slot.name, error = %reason, "MCP server unavailable; restarting in {} s", backoff.as_secs());
        slot.set_failed(format!("{reason}; retrying in {} s", backoff.as_secs()));
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = shutdown.cancelled() => return,
        }
        backoff = backoff.saturating_mul(2).min(BACKOFF_MAX);
    }
}

/// Connects, serves until the connection ends, and says why it ended (or why it never began).
async fn connect_and_serve(
    slot: &Slot,
    spec: &TransportSpec,
    secrets: &Secrets,
    shutdown: &CancellationToken,
) -> String {
    let relist = Arc::new(Notify::new());
    let handler = Handler {
        relist: relist.clone(),
    };
    match spec {
        TransportSpec::Stdio {
            command,
            args,
            env,
            cwd,
        } => {
            let mut cmd = tokio::process::Command::new(command);
            cmd.args(args)
                .envs(env.iter().map(|(k, v)| (k, v)))
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .kill_on_drop(true);
            if let Some(cwd) = cwd {
                cmd.current_dir(cwd);
            }
            // Its own process group, so a launcher's children (npx → node) end with it.
            #[cfg(unix)]
            cmd.process_group(0);
            let child = match cmd.spawn() {
                Ok(child) => child,
                Err(e) => {
                    return format!(
                        "cannot start \"{}\": {e}; check \"command\" (is it installed and on \
                         PATH?){}",
                        render::prefix(command, 200),
                        if cwd.is_some() { " and \"cwd\"" } else { "" }
                    )
                }
            };
            let mut child = Child(child);
            let (Some(stdin), Some(stdout)) = (child.0.stdin.take(), child.0.stdout.take()) else {
                return "the child's stdio could not be captured".into();
            };
            let last_stderr = Arc::new(Mutex::new(None::<String>));
            let mut drained = child.0.stderr.take().map(|stderr| {
                tokio::spawn(drain_stderr(
                    slot.name.clone(),
                    stderr,
                    last_stderr.clone(),
                    secrets.clone(),
                ))
            });
            let pid = child.0.id();
            let transport = AsyncRwTransport::<RoleClient, _, _>::new_client(stdout, stdin)
                .with_max_line_length(MAX_MESSAGE_BYTES);
            let connected = tokio::select! {
                r = tokio::time::timeout(CONNECT_TIMEOUT, handler.serve(transport)) => r,
                _ = shutdown.cancelled() => return "stopped".into(),
            };
            let ended = match connected {
                Ok(Ok(running)) => serve(slot, running, relist, pid, secrets, shutdown).await,
                Ok(Err(e)) => format!("MCP initialization failed: {e}"),
                Err(_) => format!(
                    "no MCP initialization within {} s; is it an MCP stdio server?",
                    CONNECT_TIMEOUT.as_secs()
                ),
            };
            let (exited, status) = child.exit_status().await;
            // Once the child has exited, its last error output is worth the wait.
            if let (true, Some(drained)) = (exited, drained.as_mut()) {
                let _ = tokio::time::timeout(Duration::from_secs(1), drained).await;
            }
            let ended = if exited && ended.starts_with("MCP initialization failed") {
                "it exited during MCP initialization".to_string()
            } else {
                ended
            };
            let last = last_stderr
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            match last {
                Some(line) => format!("{ended}{status}; its last error output: {line}"),
                None => format!("{ended}{status}"),
            }
        }
        TransportSpec::Http { url, headers } => {
            let client = match reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(10))
                .redirect(reqwest::redirect::Policy::none())
                .build()
            {
                Ok(c) => c,
                Err(e) => return format!("cannot build an HTTP client: {e}"),
            };
            let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
            config.max_json_response_size = MAX_MESSAGE_BYTES;
            config.max_sse_event_size = MAX_MESSAGE_BYTES;
            for (k, v) in headers {
                if let (Ok(k), Ok(v)) = (
                    reqwest::header::HeaderName::from_bytes(k.as_bytes()),
                    reqwest::header::HeaderValue::from_str(v),
                ) {
                    config.custom_headers.insert(k, v);
                }
            }
            let transport = StreamableHttpClientTransport::with_client(Http(client), config);
            let connected = tokio::select! {
                r = tokio::time::timeout(CONNECT_TIMEOUT, handler.serve(transport)) => r,
                _ = shutdown.cancelled() => return "stopped".into(),
            };
            let running = match connected {
                Ok(Ok(running)) => running,
                Ok(Err(e)) => {
                    return format!("cannot connect to {}: {e}", redact_url(url));
                }
                Err(_) => {
                    return format!(
                        "no MCP initialization from {} within {} s",
                        redact_url(url),
                        CONNECT_TIMEOUT.as_secs()
                    )
                }
            };
            serve(slot, running, relist, None, secrets, shutdown).await
        }
    }
}

/// Lists tools, marks the server ready, and serves until the connection ends or shutdown.
async fn serve(
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
        Ok(Err(ServiceError::McpError(e))) if !super::made_by_transport(&e) => Ok(()),
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

/// A stdio server's process; killed (with its process group) when dropped.
struct Child(tokio::process::Child);

impl Child {
    /// Whether it has exited within a moment, and `" (exit status …)"` if so.
    async fn exit_status(&mut self) -> (bool, String) {
        match tokio::time::timeout(Duration::from_secs(2), self.0.wait()).await {
            Ok(Ok(status)) => (true, format!(" ({status})")),
            _ => (false, String::new()),
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        // Not yet reaped, so the id still names this process group.
        #[cfg(unix)]
        if let (Ok(None), Some(pid)) = (self.0.try_wait(), self.0.id()) {
            if let Ok(pid) = i32::try_from(pid) {
                // SAFETY: kill(2) with a negative pid signals that process group; no memory
                // is touched.
                unsafe {
                    libc::kill(-pid, libc::SIGKILL);
                }
            }
        }
        let _ = self.0.start_kill();
    }
}

/// Logs a child's stderr at debug, line by line with lines cut to [`MAX_STDERR_LINE`], and
/// keeps the last line for error messages; never stops reading, so the child cannot block.
async fn drain_stderr(
    server: String,
    mut stderr: tokio::process::ChildStderr,
    last: Arc<Mutex<Option<String>>>,
    secrets: Secrets,
) {
    let mut buf = [0u8; 4096];
    let mut line: Vec<u8> = Vec::with_capacity(256);
    let emit = |line: &mut Vec<u8>| {
        let text = String::from_utf8_lossy(line).trim_end().to_string();
        line.clear();
        if text.trim().is_empty() {
            return;
        }
        let text = secrets.scrub(&text);
        tracing::debug!(server = %server, "stderr: {text}");
        let kept: String = text.chars().take(300).collect();
        *last.lock().unwrap_or_else(|p| p.into_inner()) = Some(kept);
    };
    loop {
        let n = match stderr.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        for &b in &buf[..n] {
            if b == b'\n' {
                emit(&mut line);
            } else if line.len() < MAX_STDERR_LINE {
                line.push(b);
            }
        }
    }
    emit(&mut line);
}

/// What to scrub from a server's failure and error output: its own secrets (also short
/// ones: it is its own text) and every configured secret.
#[derive(Clone)]
struct Secrets(Redactor);

/// A server's own secret values this short or shorter are no real secret.
const MIN_OWN_SECRET_CHARS: usize = 4;

impl Secrets {
    fn of(spec: &TransportSpec, all: &Redactor) -> Secrets {
        Secrets(Redactor::with_min_chars(spec.secrets(), MIN_OWN_SECRET_CHARS).and(all))
    }

    fn scrub(&self, text: &str) -> String {
        self.0.redact(text).chars().take(MAX_ERROR_CHARS).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_scrubbed_from_text() {
        let spec = TransportSpec::Http {
            url: "https://h/mcp?key=abcdef".into(),
            headers: vec![("Authorization".into(), "Bearer tok-123".into())],
        };
        let s = Secrets::of(&spec, &Redactor::new(["the-api-key-1"]));
        let out = s.scrub("sent Bearer tok-123 to https://h/mcp?key=abcdef with the-api-key-1");
        assert!(
            !out.contains("tok-123") && !out.contains("abcdef") && !out.contains("the-api-key-1"),
            "{out}"
        );
    }
}
