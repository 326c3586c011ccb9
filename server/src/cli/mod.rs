//! CONTRACT §4 client commands (`new`, `sessions`, `send`, `regenerate`, `cancel`, `retry`,
//! `tools`, `models`, `runs show`, `mcp`): thin clients of a running server's HTTP API through
//! the typed client of `app::api` (`mcp` bridges stdio to its `/mcp`). Exit codes: 0 success,
//! 2 the server refused with the contract's error, 1 anything else; with `--follow`, 0
//! completed, 3 failed, 4 cancelled.
mod args;
mod commands;
mod follow;
mod mcp_bridge;
mod render;
mod timeline;

pub use args::Command;

use app::wire::ApiError;
use args::Conn;
use render::untrusted;
use reqwest::Url;
use std::process::ExitCode;
use std::time::Duration;

/// Why a command failed.
enum Failure {
    /// The server refused (a 4xx in the contract's shape): exit 2.
    Refused { body: String, error: ApiError },
    /// Anything else, said plainly: exit 1.
    Other(String),
}

type Outcome<T> = Result<T, Failure>;

/// Runs a client command to its exit code; prints nothing but its answer or its error.
pub fn run(cmd: Command) -> ExitCode {
    let json = cmd.conn().json;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("the tokio runtime starts");
    if let Command::Mcp { conn } = &cmd {
        let bridged = target(conn).and_then(|t| rt.block_on(mcp_bridge::bridge_stdio(t)));
        return match bridged {
            Ok(()) => ExitCode::SUCCESS,
            Err(f) => fail(f, false),
        };
    }
    if matches!(
        cmd,
        Command::Send { follow: true, .. } | Command::Retry { follow: true, .. }
    ) {
        return rt
            .block_on(commands::execute_and_follow(&cmd))
            .unwrap_or_else(|f| fail(f, json));
    }
    match rt.block_on(commands::execute(&cmd)) {
        Ok(out) if json => {
            println!("{out}");
            ExitCode::SUCCESS
        }
        Ok(out) => {
            println!("{}", untrusted(&out));
            ExitCode::SUCCESS
        }
        Err(f) => fail(f, json),
    }
}

fn fail(f: Failure, json: bool) -> ExitCode {
    match f {
        Failure::Refused { body, error } => {
            if json {
                println!("{body}");
            } else {
                let said = format!("{}: {}", error.error.code, error.error.message);
                eprintln!("{}", untrusted(&said));
            }
            ExitCode::from(2)
        }
        Failure::Other(why) => {
            eprintln!("mulligan: {}", untrusted(&why));
            ExitCode::from(1)
        }
    }
}

/// The server's base URL: http(s) only.
fn base_url(conn: &Conn) -> Outcome<Url> {
    Url::parse(conn.url.trim())
        .ok()
        .filter(|u| u.scheme() == "http" || u.scheme() == "https")
        .ok_or_else(|| {
            Failure::Other(format!(
                "`{}` is not an http(s) URL: set MULLIGAN_URL (or --url), e.g. http://127.0.0.1:3000",
                conn.url
            ))
        })
}

/// The typed API client for a command's connection (each call bounded to a minute).
fn client(conn: &Conn) -> Outcome<app::api::native::Client> {
    let base = base_url(conn)?;
    let token = resolve_token(conn.token.as_deref())?;
    app::api::native::Client::new(
        base.as_str().trim_end_matches('/'),
        &token,
        Some(Duration::from_secs(60)),
    )
    .map_err(Failure::Other)
}

/// Where `mulligan mcp` posts.
fn target(conn: &Conn) -> Outcome<mcp_bridge::Target> {
    let base = base_url(conn)?;
    let token = resolve_token(conn.token.as_deref())?;
    let http = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .timeout(Duration::from_secs(60))
        .build()
        .map_err(|e| Failure::Other(format!("cannot build the HTTP client: {e}")))?;
    Ok(mcp_bridge::Target { http, base, token })
}

/// The flag or `MULLIGAN_TOKEN`, else the token the server keeps in `./data/token`
/// (`$MULLIGAN_DATA_DIR/token` when that is set).
fn resolve_token(given: Option<&str>) -> Outcome<String> {
    if let Some(t) = given.map(str::trim).filter(|t| !t.is_empty()) {
        return Ok(t.to_string());
    }
    let dir = std::env::var_os("MULLIGAN_DATA_DIR")
        .filter(|d| !d.is_empty())
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| "./data".into());
    let path = dir.join("token");
    match std::fs::read_to_string(&path) {
        Ok(t) if !t.trim().is_empty() => Ok(t.trim().to_string()),
        _ => Err(Failure::Other(format!(
            "no token: set MULLIGAN_TOKEN (or pass --token) to the server's token \
             (the one in the URL `mulligan serve` prints); found none in {}",
            path.display()
        ))),
    }
}
