//! The `MULLIGAN_MCP_CONFIG` file: which MCP servers to start, validated with errors that say
//! which server and field is wrong; secrets in `env`/`headers` never show in Debug output.
mod entry;
mod spec;

pub use spec::{redact_url, ServerSpec, TransportSpec};

use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use std::fmt;
use std::path::Path;

/// The name reserved for Mulligan's built-in tool source.
pub const BUILTIN_NAME: &str = "mulligan";
/// A config file larger than this is refused (it is a handful of server entries).
pub const MAX_CONFIG_BYTES: u64 = 1024 * 1024;
/// At most this many servers per file.
pub const MAX_SERVERS: usize = 64;

/// Why a config file was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(String);

impl ConfigError {
    fn server(name: &str, msg: impl fmt::Display) -> Self {
        ConfigError(format!("MCP server \"{name}\": {msg}"))
    }
}

/// Reads and validates the file at `path`.
pub fn load(path: &Path) -> Result<Vec<ServerSpec>, ConfigError> {
    let shown = path.display();
    let meta = std::fs::metadata(path)
        .map_err(|e| ConfigError(format!("cannot read the MCP config {shown}: {e}")))?;
    if meta.len() > MAX_CONFIG_BYTES {
        return Err(ConfigError(format!(
            "the MCP config {shown} is larger than {MAX_CONFIG_BYTES} bytes; is it the right file?"
        )));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigError(format!("cannot read the MCP config {shown}: {e}")))?;
    parse(&text).map_err(|e| ConfigError(format!("{shown}: {e}")))
}

/// Parses and validates a config file's text.
pub fn parse(text: &str) -> Result<Vec<ServerSpec>, ConfigError> {
    // serde_json's own messages quote no values, only positions, so they leak no secret.
    let file: File = serde_json::from_str(text).map_err(|e| {
        ConfigError(format!(
            "not a valid MCP config ({e}); expected {{\"mcpServers\": {{\"<name>\": \
             {{\"command\": …}} | {{\"url\": …}}}}}}"
        ))
    })?;
    let Some(servers) = file.mcp_servers else {
        return Err(ConfigError(
            "no \"mcpServers\" object; expected {\"mcpServers\": {\"<name>\": {\"command\": …} \
             | {\"url\": …}}}"
                .into(),
        ));
    };
    if servers.0.len() > MAX_SERVERS {
        return Err(ConfigError(format!(
            "{} MCP servers configured; at most {MAX_SERVERS} are supported",
            servers.0.len()
        )));
    }
    let mut specs: Vec<ServerSpec> = Vec::with_capacity(servers.0.len());
    for (name, value) in servers.0 {
        check_name(&name)?;
        if specs.iter().any(|s| s.name == name) {
            return Err(ConfigError::server(
                &name,
                "listed twice; give each server its own name",
            ));
        }
        let approval = entry::approval_of(&name, &value)?;
        let transport = entry::server(&name, value)?;
        specs.push(ServerSpec {
            name,
            transport,
            approval,
        });
    }
    Ok(specs)
}

fn check_name(name: &str) -> Result<(), ConfigError> {
    let shown: String = name.chars().take(40).collect();
    let ok = (1..=32).contains(&name.len())
        && name
            .bytes()
            .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-'));
    if !ok {
        return Err(ConfigError::server(
            &shown,
            "invalid name; use 1 to 32 of a-z, 0-9, _ and - (tools reach the model as \
             <server>__<tool>)",
        ));
    }
    if name == BUILTIN_NAME {
        return Err(ConfigError::server(
            name,
            "the name is reserved for Mulligan's built-in tools; rename this server",
        ));
    }
    Ok(())
}

#[derive(Deserialize)]
struct File {
    #[serde(rename = "mcpServers")]
    mcp_servers: Option<Ordered>,
}

/// A JSON object's entries in file order (serde_json's map sorts them).
struct Ordered(Vec<(String, serde_json::Value)>);

impl<'de> Deserialize<'de> for Ordered {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Ordered;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object of MCP servers by name")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Ordered, A::Error> {
                let mut entries = Vec::new();
                while let Some((k, v)) = m.next_entry::<String, serde_json::Value>()? {
                    if entries.len() > MAX_SERVERS {
                        return Err(serde::de::Error::custom(format!(
                            "more than {MAX_SERVERS} MCP servers"
                        )));
                    }
                    entries.push((k, v));
                }
                Ok(Ordered(entries))
            }
        }
        d.deserialize_map(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        parse(text).unwrap_err().to_string()
    }

    #[test]
    fn both_transports_parse_in_file_order() {
        let specs = parse(
            r#"{"mcpServers": {
                "zeta": {"command": "npx", "args": ["-y", "x"], "env": {"K": "v"}, "cwd": "/tmp"},
                "alpha": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer t"}},
                "mid_1": {"type": "stdio", "command": "srv"}
            }}"#,
        )
        .unwrap();
        let names: Vec<_> = specs.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["zeta", "alpha", "mid_1"]);
        assert_eq!(
            specs[0].transport,
            TransportSpec::Stdio {
                command: "npx".into(),
                args: vec!["-y".into(), "x".into()],
                env: vec![("K".into(), "v".into())],
                cwd: Some("/tmp".into()),
            }
        );
        assert_eq!(specs[1].transport.wire(), app::wire::ToolTransport::Http);
        assert_eq!(
            specs[2].transport,
            TransportSpec::Stdio {
                command: "srv".into(),
                args: vec![],
                env: vec![],
                cwd: None
            }
        );
    }

    #[test]
    fn an_empty_server_list_is_fine() {
        assert!(parse(r#"{"mcpServers": {}}"#).unwrap().is_empty());
    }

    #[test]
    fn bad_names_are_refused_with_the_rule() {
        for bad in ["Upper", "has space", "", &"x".repeat(33), "dot.ted"] {
            let e = err(&format!(
                r#"{{"mcpServers": {{"{bad}": {{"command": "x"}}}}}}"#
            ));
            assert!(e.contains("a-z, 0-9, _ and -"), "{bad}: {e}");
        }
        let e = err(r#"{"mcpServers": {"mulligan": {"command": "x"}}}"#);
        assert!(e.contains("\"mulligan\"") && e.contains("reserved"), "{e}");
    }

    #[test]
    fn errors_name_the_server_and_the_field() {
        let cases = [
            (r#"{"a": {}}"#, "needs \"command\""),
            (r#"{"a": {"command": "x", "url": "http://h/mcp"}}"#, "both"),
            (r#"{"a": {"command": ""}}"#, "\"command\" must be"),
            (r#"{"a": {"command": "x", "args": "y"}}"#, "\"args\""),
            (r#"{"a": {"command": "x", "args": [1]}}"#, "\"args\""),
            (
                r#"{"a": {"command": "x", "env": {"K": 1}}}"#,
                "\"env\": the value of \"K\"",
            ),
            (
                r#"{"a": {"command": "x", "arg": []}}"#,
                "unknown field \"arg\"",
            ),
            (r#"{"a": {"url": "ftp://h/x"}}"#, "http:// or https://"),
            (r#"{"a": {"url": "not a url"}}"#, "http:// or https://"),
            (
                r#"{"a": {"url": "http://h/mcp", "headers": {"Accept": "x"}}}"#,
                "\"Accept\"",
            ),
            (r#"{"a": {"url": "http://h/mcp", "type": "sse"}}"#, "SSE"),
            (r#"{"a": {"command": "x", "type": "http"}}"#, "\"type\""),
            (r#"{"a": 3}"#, "must be an object"),
        ];
        for (servers, want) in cases {
            let e = err(&format!(r#"{{"mcpServers": {servers}}}"#));
            assert!(e.contains("MCP server \"a\""), "{servers}: {e}");
            assert!(e.contains(want), "{servers}: {e}");
        }
        let e = err(r#"{"mcpServers": {"a": {"command": "x"}, "a": {"command": "y"}}}"#);
        assert!(e.contains("twice"), "{e}");
        assert!(err(r#"{"servers": {}}"#).contains("mcpServers"));
        assert!(err("{nope").contains("not a valid MCP config"));
    }

    #[test]
    fn secrets_never_show_in_debug_or_errors() {
        let specs = parse(
            r#"{"mcpServers": {
                "s": {"command": "x", "env": {"API_KEY": "sk-secret-1"}},
                "h": {"url": "https://u:pw-secret-3@example.com/mcp?key=q-secret-4",
                      "headers": {"Authorization": "Bearer secret-2"}}
            }}"#,
        )
        .unwrap();
        let shown = format!("{specs:?}");
        for secret in ["sk-secret-1", "secret-2", "pw-secret-3", "q-secret-4"] {
            assert!(!shown.contains(secret), "{shown}");
        }
        assert!(
            shown.contains("API_KEY") && shown.contains("Authorization"),
            "{shown}"
        );
        let e = err(
            r#"{"mcpServers": {"h": {"url": "http://h/mcp", "headers": {"X-Key": "bad\u0001secret-5"}}}}"#,
        );
        assert!(!e.contains("secret-5") && e.contains("X-Key"), "{e}");
    }

    #[test]
    fn load_names_the_file() {
        let dir = std::env::temp_dir().join(format!("mcp-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("mcp.json");
        std::fs::write(&path, r#"{"mcpServers": {"A": {"command": "x"}}}"#).unwrap();
        let e = load(&path).unwrap_err().to_string();
        assert!(e.contains("mcp.json") && e.contains("\"A\""), "{e}");
        let e = load(&dir.join("missing.json")).unwrap_err().to_string();
        assert!(e.contains("cannot read"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
