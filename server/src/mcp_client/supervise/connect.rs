//! One connection to a server: a stdio child started or a streamable HTTP endpoint reached,
//! initialized within a bound, then served; says why it ended (or why it never began).
use super::child::drain_stderr;
use super::serve::{serve, Handler};
use super::Secrets;
use crate::child_env::Child;
use crate::mcp_client::config::{redact_url, TransportSpec};
use crate::mcp_client::http::Http;
use crate::mcp_client::{render, Slot};
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{RoleClient, ServiceExt};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// Starting, initializing and the first listing must finish within this.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// One JSON-RPC message from a server (a line on stdio, a body or SSE event over HTTP).
const MAX_MESSAGE_BYTES: usize = 8 * 1024 * 1024;

/// Connects, serves until the connection ends, and says why it ended (or why it never began).
pub(super) async fn connect_and_serve(
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
            let mut cmd = crate::child_env::command(command, env.iter().map(|(k, v)| (k, v)));
            cmd.args(args)
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .kill_on_drop(true);
            if let Some(cwd) = cwd {
                cmd.current_dir(cwd);
            }
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
