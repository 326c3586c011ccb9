//! The `MULLIGAN_MCP_CONFIG` file: which MCP servers to start, validated with errors that say
//! which server and field is wrong; secrets in `env`/`headers` never show in Debug output.
use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use std::fmt;
use std::path::{Path, PathBuf};

/// The name reserved for Mulligan's built-in tool source.
pub const BUILTIN_NAME: &str = "mulligan";
/// A config file larger than this is refused (it is a handful of server entries).
pub const MAX_CONFIG_BYTES: u64 = 1024 * 1024;
/// At most this many servers per file.
pub const MAX_SERVERS: usize = 64;

/// One configured MCP server, in the order the file lists it.
#[derive(Clone, PartialEq, Eq)]
pub struct ServerSpec {
    pub name: String,
    pub transport: TransportSpec,
    /// Which of its calls ask the operator first (CONTRACT §8).
    pub approval: crate::approval::SourceRule,
}

/// How to reach a server.
#[derive(Clone, PartialEq, Eq)]
pub enum TransportSpec {
    /// A child process speaking MCP over its stdin/stdout.
    Stdio {
        command: String,
        args: Vec<String>,
        /// Added to the inherited environment; values are secrets.
        env: Vec<(String, String)>,
        cwd: Option<PathBuf>,
    },
    /// A streamable HTTP endpoint.
    Http {
        url: String,
        /// Sent with every request; values are secrets.
        headers: Vec<(String, String)>,
    },
}

impl TransportSpec {
    pub fn wire(&self) -> app::wire::ToolTransport {
        match self {
            TransportSpec::Stdio { .. } => app::wire::ToolTransport::Stdio,
            TransportSpec::Http { .. } => app::wire::ToolTransport::Http,
        }
    }

    /// The secret values: every `env` or `headers` value, and a URL's password and query.
    pub fn secrets(&self) -> Vec<String> {
        match self {
            TransportSpec::Stdio { env, .. } => env.iter().map(|(_, v)| v.clone()).collect(),
            TransportSpec::Http { url, headers } => {
                let mut v: Vec<String> = headers.iter().map(|(_, v)| v.clone()).collect();
                if let Ok(u) = reqwest::Url::parse(url) {
                    v.extend(u.password().map(str::to_string));
                    v.extend(u.query().map(str::to_string));
                }
                v
            }
        }
    }
}

/// Names of secret-bearing entries are shown, their values never.
struct Redacted<'a>(&'a [(String, String)]);

impl fmt::Debug for Redacted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.0.iter().map(|(k, _)| (k, "<redacted>")))
            .finish()
    }
}

impl fmt::Debug for TransportSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TransportSpec::Stdio {
                command,
                args,
                env,
                cwd,
            } => f
                .debug_struct("Stdio")
                .field("command", command)
                .field("args", args)
                .field("env", &Redacted(env))
                .field("cwd", cwd)
                .finish(),
            TransportSpec::Http { url, headers } => f
                .debug_struct("Http")
                .field("url", &redact_url(url))
                .field("headers", &Redacted(headers))
                .finish(),
        }
    }
}

impl fmt::Debug for ServerSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerSpec")
            .field("name", &self.name)
            .field("transport", &self.transport)
            .finish()
    }
}

/// A URL without its user info or query (either may carry a credential).
pub fn redact_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut u) => {
            let had_query = u.query().is_some();
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.set_query(None);
            u.set_fragment(None);
            let mut s = u.to_string();
            if had_query {
                s.push_str("?…");
            }
            s
        }
        Err(_) => "<invalid url>".to_string(),
    }
}

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
        let approval = approval_of(&name, &value)?;
        let transport = server(&name, value)?;
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

const STDIO_FIELDS: &[&str] = &[
    "command",
    "args",
    "env",
    "cwd",
    "type",
    "approval",
    "approval_tools",
];
const HTTP_FIELDS: &[&str] = &["url", "headers", "type", "approval", "approval_tools"];

/// A server's `"approval"` (`writes`, `always`, `never`) and `"approval_tools"` (a tool name
/// to `always` or `never`).
fn approval_of(
    name: &str,
    value: &serde_json::Value,
) -> Result<crate::approval::SourceRule, ConfigError> {
    use crate::approval::{Rule, SourceRule};
    let mut out = SourceRule::default();
    match value.get("approval") {
        None => {}
        Some(serde_json::Value::String(w)) => {
            out.rule = Rule::parse(w).ok_or_else(|| {
                ConfigError::server(
                    name,
                    "\"approval\" must be \"writes\" (ask before tools not marked read-only),                      \"always\" or \"never\"",
                )
            })?;
        }
        Some(_) => {
            return Err(ConfigError::server(
                name,
                "\"approval\" must be a string: \"writes\", \"always\" or \"never\"",
            ))
        }
    }
    match value.get("approval_tools") {
        None => {}
        Some(serde_json::Value::Object(tools)) => {
            for (tool, rule) in tools {
                let rule = match rule.as_str() {
                    Some("always") => Rule::Always,
                    Some("never") => Rule::Never,
                    _ => {
                        let shown: String = tool.chars().take(64).collect();
                        return Err(ConfigError::server(
                            name,
                            format!(
                                "\"approval_tools\": \"{shown}\" must be \"always\" or \"never\""
                            ),
                        ));
                    }
                };
                out.tools.push((tool.clone(), rule));
            }
        }
        Some(_) => {
            return Err(ConfigError::server(
                name,
                "\"approval_tools\" must be an object of tool names to \"always\" or \"never\"",
            ))
        }
    }
    Ok(out)
}
/// Headers the transport sets itself.
const RESERVED_HEADERS: &[&str] = &[
    "accept",
    "content-type",
    "content-length",
    "host",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
];

fn server(name: &str, value: serde_json::Value) -> Result<TransportSpec, ConfigError> {
    let serde_json::Value::Object(obj) = value else {
        return Err(ConfigError::server(
            name,
            "must be an object with \"command\" (stdio) or \"url\" (streamable HTTP)",
        ));
    };
    let kind = match obj.get("type") {
        None => None,
        Some(serde_json::Value::String(t)) => Some(t.as_str()),
        Some(_) => return Err(ConfigError::server(name, "\"type\" must be a string")),
    };
    let transport = match (obj.contains_key("command"), obj.contains_key("url")) {
        (true, true) => {
            return Err(ConfigError::server(
                name,
                "has both \"command\" and \"url\"; keep \"command\" for a local process or \
                 \"url\" for a streamable HTTP server",
            ))
        }
        (false, false) => {
            return Err(ConfigError::server(
                name,
                "needs \"command\" (a local process) or \"url\" (a streamable HTTP server)",
            ))
        }
        (true, false) => "stdio",
        (false, true) => "http",
    };
    match (transport, kind) {
        (_, None) | ("stdio", Some("stdio")) => {}
        ("http", Some("http" | "streamable-http" | "streamableHttp")) => {}
        (_, Some("sse")) => {
            return Err(ConfigError::server(
                name,
                "the legacy SSE transport is not supported; use the server's streamable HTTP \
                 endpoint (often ending in /mcp)",
            ))
        }
        (_, Some(other)) => {
            let other: String = other.chars().take(40).collect();
            return Err(ConfigError::server(
                name,
                format!(
                    "\"type\": \"{other}\" does not fit its {}; use \"stdio\" with \"command\" \
                     or \"http\" with \"url\"",
                    if transport == "stdio" {
                        "\"command\""
                    } else {
                        "\"url\""
                    }
                ),
            ));
        }
    }
    let allowed = if transport == "stdio" {
        STDIO_FIELDS
    } else {
        HTTP_FIELDS
    };
    if let Some(unknown) = obj.keys().find(|k| !allowed.contains(&k.as_str())) {
        let unknown: String = unknown.chars().take(40).collect();
        return Err(ConfigError::server(
            name,
            format!(
                "unknown field \"{unknown}\"; a {} server has {}",
                if transport == "stdio" {
                    "stdio"
                } else {
                    "streamable HTTP"
                },
                allowed
                    .iter()
                    .map(|f| format!("\"{f}\""))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    if transport == "stdio" {
        let command = match obj.get("command") {
            Some(serde_json::Value::String(c)) if !c.trim().is_empty() => c.clone(),
            _ => {
                return Err(ConfigError::server(
                    name,
                    "\"command\" must be a non-empty string (the program to run)",
                ))
            }
        };
        let args = match obj.get("args") {
            None => Vec::new(),
            Some(serde_json::Value::Array(a)) => a
                .iter()
                .map(|v| v.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| ConfigError::server(name, "\"args\" must be an array of strings"))?,
            Some(_) => {
                return Err(ConfigError::server(
                    name,
                    "\"args\" must be an array of strings",
                ))
            }
        };
        let env = string_map(name, "env", obj.get("env"))?;
        for (k, _) in &env {
            if k.is_empty() || k.contains('=') || k.contains('\0') {
                return Err(ConfigError::server(
                    name,
                    "\"env\" has an invalid variable name (empty, or with '=' or NUL)",
                ));
            }
        }
        let cwd = match obj.get("cwd") {
            None => None,
            Some(serde_json::Value::String(c)) if !c.is_empty() => Some(PathBuf::from(c)),
            Some(_) => {
                return Err(ConfigError::server(
                    name,
                    "\"cwd\" must be a non-empty string (a directory)",
                ))
            }
        };
        Ok(TransportSpec::Stdio {
            command,
            args,
            env,
            cwd,
        })
    } else {
        let url = match obj.get("url") {
            Some(serde_json::Value::String(u)) => u.clone(),
            _ => {
                return Err(ConfigError::server(
                    name,
                    "\"url\" must be a string such as \"http://127.0.0.1:3001/mcp\"",
                ))
            }
        };
        match reqwest::Url::parse(&url) {
            Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => {}
            _ => {
                return Err(ConfigError::server(
                    name,
                    "\"url\" must be an absolute http:// or https:// URL",
                ))
            }
        }
        let headers = string_map(name, "headers", obj.get("headers"))?;
        for (k, v) in &headers {
            let shown: String = k.chars().take(40).collect();
            if reqwest::header::HeaderName::from_bytes(k.as_bytes()).is_err() {
                return Err(ConfigError::server(
                    name,
                    format!("\"headers\": \"{shown}\" is not a valid header name"),
                ));
            }
            if RESERVED_HEADERS.contains(&k.to_ascii_lowercase().as_str()) {
                return Err(ConfigError::server(
                    name,
                    format!("\"headers\": \"{shown}\" is set by the MCP transport; remove it"),
                ));
            }
            if reqwest::header::HeaderValue::from_str(v).is_err() {
                return Err(ConfigError::server(
                    name,
                    format!(
                        "\"headers\": the value of \"{shown}\" is not a valid header value \
                         (control characters?)"
                    ),
                ));
            }
        }
        Ok(TransportSpec::Http { url, headers })
    }
}

fn string_map(
    name: &str,
    field: &str,
    value: Option<&serde_json::Value>,
) -> Result<Vec<(String, String)>, ConfigError> {
    match value {
        None => Ok(Vec::new()),
        Some(serde_json::Value::Object(m)) => m
            .iter()
            .map(|(k, v)| match v {
                serde_json::Value::String(s) => Ok((k.clone(), s.clone())),
                _ => {
                    let shown: String = k.chars().take(40).collect();
                    Err(ConfigError::server(
                        name,
                        format!("\"{field}\": the value of \"{shown}\" must be a string"),
                    ))
                }
            })
            .collect(),
        Some(_) => Err(ConfigError::server(
            name,
            format!("\"{field}\" must be an object of strings"),
        )),
    }
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
