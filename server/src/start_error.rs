//! Why [`crate::start`] did not start: each variant says which setting or place to fix.
use crate::error::Error;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A setting out of its range (which one, and what it takes).
    #[error("{0}")]
    Setting(String),
    /// `MULLIGAN_TOKEN` was refused (what a token must be).
    #[error("{0}")]
    Token(String),
    #[error("cannot create the data dir {}: {source}", dir.display())]
    DataDir {
        dir: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("cannot keep the token in {}: {source}", dir.display())]
    TokenFile {
        dir: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("cannot open the database: {0}")]
    Database(#[from] crate::store::StoreError),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error("MULLIGAN_MCP_CONFIG {}: {source}", path.display())]
    McpConfig {
        path: std::path::PathBuf,
        source: crate::mcp_client::ConfigError,
    },
    #[error("MULLIGAN_PROVIDERS {}: {message}", path.display())]
    Providers {
        path: std::path::PathBuf,
        message: String,
    },
    /// The event log, the first heartbeat or the recovery of interrupted runs failed.
    #[error("{0}")]
    Engine(#[from] Error),
}
