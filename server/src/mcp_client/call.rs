//! One tool call: sent to a ready server with a timeout and cancellation, its answer (or the
//! lack of one) told as a [`CallEnd`] whose text holds no configured secret.
use super::render::{self, MAX_RESULT_BYTES};
use super::McpServers;
use crate::redact::Redactor;
use app::wire::ToolServerStatus;
use rmcp::model::{CallToolRequest, CallToolRequestParams, ClientRequest, ServerResult};
use rmcp::service::{PeerRequestOptions, ServiceError};
use rmcp::{Peer, RoleClient};
use std::time::Duration;
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

impl McpServers {
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
