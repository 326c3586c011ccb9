//! Tool sources of agent turns (CONTRACT §6): the built-in `mulligan` source and the
//! configured MCP servers, the tool names a model sees (`<server>__<tool>`), and the bounds
//! every tool result is held to. Executing a built-in tool needs the engine, so it is done
//! by the run engine (`engine::step`); the configured MCP servers are reached through
//! [`McpServers`] (`crate::mcp_client`).
use crate::mcp_client::McpServers;
use app::wire::{ToolInfo, ToolServer, ToolServerStatus, ToolTransport, MAX_TOOL_RESULT_BYTES};
use serde_json::Value;
use std::sync::Arc;

/// The built-in source's name.
pub const BUILTIN: &str = "mulligan";
/// Separates server and tool in the names a model sees.
const SEPARATOR: &str = "__";
/// The longest tool name providers accept.
const MAX_NAME: usize = 64;

pub use crate::mcp_client::CallEnd;

/// Every tool source of this instance.
#[derive(Clone)]
pub struct Toolbox {
    external: McpServers,
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
    pub fn new(external: McpServers, builtin: Vec<ToolInfo>) -> Toolbox {
        Toolbox {
            external,
            builtin: Arc::new(builtin),
        }
    }

    /// The configured MCP servers.
    pub fn external(&self) -> &McpServers {
        &self.external
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
        let tb = Toolbox::new(McpServers::empty(), vec![]);
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
