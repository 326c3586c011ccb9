//! A configured server's spec: how to reach it, its secrets, and a Debug that shows their
//! names but never their values.
use std::fmt;
use std::path::PathBuf;

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
