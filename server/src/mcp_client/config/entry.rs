//! One server's entry of the config file: its transport fields and its approval rules,
//! checked with errors that name the server and the field.
use super::spec::TransportSpec;
use super::ConfigError;
use std::path::PathBuf;

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
pub(super) fn approval_of(
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

pub(super) fn server(name: &str, value: serde_json::Value) -> Result<TransportSpec, ConfigError> {
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
