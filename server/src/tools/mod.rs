//! Tool sources of agent turns (CONTRACT §6): the built-in `mulligan` source and the
//! configured MCP servers, the tool names a model sees (`<server>__<tool>`), and the bounds
//! every tool result is held to. The built-in tools are defined and run in [`builtin`],
//! through the session commands the engine lends them; the configured MCP servers are reached through
//! [`McpServers`] (`crate::mcp_client`).
pub mod builtin;

use crate::approval;
use crate::mcp_client::McpServers;
use app::wire::{ToolInfo, ToolServer, ToolServerStatus, ToolTransport, MAX_TOOL_RESULT_BYTES};
use std::sync::Arc;

/// The built-in source's name.
pub const BUILTIN: &str = app::wire::BUILTIN_SOURCE;
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
    /// Each configured source's approval rule (a source not here: `writes`).
    rules: Arc<Vec<(String, approval::SourceRule)>>,
}

pub use crate::llm::Offered;

impl Toolbox {
    pub fn new(external: McpServers, builtin: Vec<ToolInfo>) -> Toolbox {
        Toolbox {
            external,
            builtin: Arc::new(builtin),
            rules: Arc::default(),
        }
    }

    /// With the configured sources' approval rules.
    pub fn with_rules(mut self, rules: Vec<(String, approval::SourceRule)>) -> Toolbox {
        self.rules = Arc::new(rules);
        self
    }

    /// A source's approval rule (`writes` unless its config says otherwise).
    pub fn rule(&self, server: &str) -> approval::SourceRule {
        self.rules
            .iter()
            .find(|(name, _)| name == server)
            .map(|(_, r)| r.clone())
            .unwrap_or_default()
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

    /// Waits until none of `sources` is still starting, or `within` passes; answers those
    /// still starting then (the built-in source is always ready).
    pub async fn started(&self, sources: &[String], within: std::time::Duration) -> Vec<String> {
        self.external.started(sources, within).await
    }

    /// The tools of the ready sources among `sources`, named for the model (the built-in
    /// source first, then the configured servers in order). Shares each source's tool list.
    pub fn offered(&self, sources: &[String]) -> Arc<[Offered]> {
        let mut out: Vec<Offered> = Vec::new();
        let mut add = |server: &str, tools: &Arc<Vec<ToolInfo>>| {
            if !sources.iter().any(|s| s == server) {
                return;
            }
            for (index, tool) in tools.iter().enumerate() {
                let model_name = model_name(server, &tool.name);
                if out.iter().any(|o| o.model_name == model_name) {
                    continue; // two tools that read the same once sanitized: the first wins
                }
                if let Some(offered) = Offered::new(model_name, server, tools.clone(), index) {
                    out.push(offered);
                }
            }
        };
        add(BUILTIN, &self.builtin);
        self.external.each_ready(add);
        out.into()
    }

    /// The tool a call was recorded with, `tool` of `server`, while `server` is ready and
    /// among `sources`: found by both names, never by the model's name, so a twin that reads
    /// the same once sanitized (and shadows it in [`Toolbox::offered`]) is never sent it.
    pub fn recorded(&self, sources: &[String], server: &str, tool: &str) -> Option<Offered> {
        let mut found = None;
        let mut look = |name: &str, tools: &Arc<Vec<ToolInfo>>| {
            if found.is_some() || name != server || !sources.iter().any(|s| s == name) {
                return;
            }
            if let Some(index) = tools.iter().position(|t| t.name == tool) {
                found = Offered::new(model_name(name, tool), name, tools.clone(), index);
            }
        };
        look(BUILTIN, &self.builtin);
        self.external.each_ready(look);
        found
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
        assert!(tb.offered(&["mulligan".into()]).is_empty());
    }

    fn tool(name: &str, description: &str) -> ToolInfo {
        ToolInfo {
            name: name.into(),
            description: Some(description.into()),
            input_schema: serde_json::json!({"type": "object", "title": name}),
            read_only: None,
            destructive: None,
            idempotent: None,
            open_world: None,
        }
    }

    #[test]
    fn offered_tools_are_named_for_the_model_and_read_from_their_source() {
        let builtin = vec![
            tool("read.me", "first"),
            tool("read_me", "second"),
            tool("b", ""),
        ];
        let tb = Toolbox::new(McpServers::empty(), builtin);
        let offered = tb.offered(&["mulligan".into()]);
        let seen: Vec<_> = offered
            .iter()
            .map(|o| {
                (
                    o.model_name.as_str(),
                    o.server.as_str(),
                    o.tool(),
                    o.description(),
                )
            })
            .collect();
        // `read.me` and `read_me` read the same once sanitized: the first wins.
        assert_eq!(
            seen,
            [
                ("mulligan__read_me", "mulligan", "read.me", "first"),
                ("mulligan__b", "mulligan", "b", ""),
            ]
        );
        assert_eq!(offered[1].input_schema()["title"], "b");
        assert!(tb.offered(&["other".into()]).is_empty());
    }

    #[test]
    fn a_recorded_call_finds_its_own_tool_not_the_twin_that_shadows_it() {
        let builtin = vec![tool("read.me", "first"), tool("read_me", "second")];
        let tb = Toolbox::new(McpServers::empty(), builtin);
        let chosen = ["mulligan".to_string()];
        for (name, description) in [("read.me", "first"), ("read_me", "second")] {
            let found = tb.recorded(&chosen, "mulligan", name).expect(name);
            assert_eq!(
                (found.server.as_str(), found.tool(), found.description()),
                ("mulligan", name, description)
            );
        }
        assert!(tb.recorded(&chosen, "mulligan", "gone").is_none());
        assert!(tb.recorded(&[], "mulligan", "read_me").is_none());
        assert!(tb.recorded(&chosen, "other", "read_me").is_none());
    }
}
