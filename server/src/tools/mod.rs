//! Tool sources of agent turns (CONTRACT §6): the built-in `mulligan` source and the
//! configured MCP servers, the tool names a model sees (`<server>__<tool>`), and the bounds
//! every tool result is held to. Executing a built-in tool needs the engine, so it is done
//! by the run engine (`engine::step`); the MCP servers are reached through [`External`].
use app::wire::{ToolInfo, ToolServer, ToolServerStatus, ToolTransport, MAX_TOOL_RESULT_BYTES};
use futures::future::BoxFuture;
use serde_json::{Map, Value};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The built-in source's name.
pub const BUILTIN: &str = "mulligan";
/// Separates server and tool in the names a model sees.
const SEPARATOR: &str = "__";
/// The longest tool name providers accept.
const MAX_NAME: usize = 64;

/// How a call to a tool server ended.
#[derive(Clone, Debug, PartialEq)]
pub enum CallEnd {
    /// The server answered; `is_error` is MCP's `isError`.
    Done { text: String, is_error: bool },
    /// Not sent: the server is not ready, or has no such tool. `text` says why.
    NotSent { text: String },
    /// Sent, with no answer: timed out, or the connection died mid-call.
    Lost { text: String },
    /// Cancelled while running (MCP `notifications/cancelled` sent).
    Cancelled,
}

/// The configured MCP servers, as the run engine uses them.
pub trait External: Send + Sync + 'static {
    /// Each server's status and tools, in configuration order.
    fn servers(&self) -> Vec<ToolServer>;
    /// Calls one tool; never fails otherwise than with a [`CallEnd`].
    fn call<'a>(
        &'a self,
        server: &'a str,
        tool: &'a str,
        arguments: Map<String, Value>,
        timeout: Duration,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, CallEnd>;
}

/// No configured servers.
pub struct NoServers;

impl External for NoServers {
    fn servers(&self) -> Vec<ToolServer> {
        Vec::new()
    }
    fn call<'a>(
        &'a self,
        server: &'a str,
        _tool: &'a str,
        _arguments: Map<String, Value>,
        _timeout: Duration,
        _cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, CallEnd> {
        Box::pin(async move {
            CallEnd::NotSent {
                text: format!("no tool server named {server:?} is configured"),
            }
        })
    }
}

/// Every tool source of this instance.
#[derive(Clone)]
pub struct Toolbox {
    external: Arc<dyn External>,
    builtin: Arc<Vec<ToolInfo>>,
}

/// A tool a model may call in a step, by the name it was given.
#[derive(Clone, Debug, PartialEq)]
pub struct Offered {
    pub model_name: String,
    pub server: String,
    pub tool: String,
    pub description: String,
    pub input_schema: Value,
}

impl Toolbox {
    pub fn new(external: Arc<dyn External>, builtin: Vec<ToolInfo>) -> Toolbox {
        Toolbox {
            external,
            builtin: Arc::new(builtin),
        }
    }

    pub fn external(&self) -> &dyn External {
        &*self.external
    }

    /// `GET /tools`: the built-in source first, then each configured server.
    pub fn servers(&self) -> Vec<ToolServer> {
        let mut all = vec![ToolServer {
            name: BUILTIN.into(),
            transport: ToolTransport::Builtin,
            status: ToolServerStatus::Ready,
            error: None,
            tools: (*self.builtin).clone(),
        }];
        all.extend(self.external.servers());
        all
    }

    /// Every source's name: a new session's default.
    pub fn names(&self) -> Vec<String> {
        self.servers().into_iter().map(|s| s.name).collect()
    }

    /// Checks a session's choice of sources: each must be a known source.
    pub fn check_choice(&self, chosen: &[String]) -> Result<Vec<String>, String> {
        let known = self.names();
        let mut out: Vec<String> = Vec::with_capacity(chosen.len());
        for name in chosen {
            let name = name.trim();
            if !known.iter().any(|k| k == name) {
                return Err(format!(
                    "{name:?} is not a tool source here (known: {}); see GET /api/v1/tools",
                    known.join(", ")
                ));
            }
            if !out.iter().any(|o| o == name) {
                out.push(name.to_string());
            }
        }
        Ok(out)
    }

    /// The tools of the ready sources among `sources`, named for the model.
    pub fn offered(&self, sources: &[String]) -> Vec<Offered> {
        let mut out = Vec::new();
        for server in self.servers() {
            if server.status != ToolServerStatus::Ready || !sources.contains(&server.name) {
                continue;
            }
            for tool in server.tools {
                let model_name = model_name(&server.name, &tool.name);
                if out.iter().any(|o: &Offered| o.model_name == model_name) {
                    continue; // two tools that read the same once sanitized: the first wins
                }
                out.push(Offered {
                    model_name,
                    server: server.name.clone(),
                    description: tool.description.clone().unwrap_or_default(),
                    input_schema: tool.input_schema.clone(),
                    tool: tool.name,
                });
            }
        }
        out
    }
}

/// `<server>__<tool>` in the characters every provider accepts (`[a-zA-Z0-9_-]`), at most
/// 64 of them.
pub fn model_name(server: &str, tool: &str) -> String {
    let mut name: String = format!("{server}{SEPARATOR}{tool}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    name.truncate(MAX_NAME);
    name
}

/// A tool result held to [`MAX_TOOL_RESULT_BYTES`], cut at a character boundary with a note.
pub fn bounded_result(text: &str) -> String {
    if text.len() <= MAX_TOOL_RESULT_BYTES {
        return text.to_string();
    }
    let note = format!(
        "\n[… truncated: the result had {} bytes; {MAX_TOOL_RESULT_BYTES} are kept]",
        text.len()
    );
    let mut end = MAX_TOOL_RESULT_BYTES.saturating_sub(note.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{note}", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_names_are_sanitized_and_bounded() {
        assert_eq!(model_name("fs", "read_file"), "fs__read_file");
        assert_eq!(model_name("fs", "read.file/x"), "fs__read_file_x");
        assert_eq!(model_name("a", &"t".repeat(100)).len(), 64);
    }

    #[test]
    fn long_results_are_truncated_with_a_note() {
        let long = "é".repeat(MAX_TOOL_RESULT_BYTES);
        let cut = bounded_result(&long);
        assert!(cut.len() <= MAX_TOOL_RESULT_BYTES);
        assert!(cut.ends_with("are kept]"));
        assert_eq!(bounded_result("short"), "short");
    }

    #[test]
    fn a_choice_names_known_sources_only() {
        let tb = Toolbox::new(Arc::new(NoServers), vec![]);
        assert_eq!(
            tb.check_choice(&["mulligan".into()]).unwrap(),
            vec!["mulligan"]
        );
        assert!(tb
            .check_choice(&["nope".into()])
            .unwrap_err()
            .contains("nope"));
        assert_eq!(tb.offered(&["mulligan".into()]), vec![]);
    }
}
