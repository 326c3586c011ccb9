//! `mulligan serve` as a child process of the test, and a client of it.
use crate::{TestServer, API_KEY};
use std::path::PathBuf;
use std::time::Duration;

/// Starts `mulligan serve` as a child process (on `database_url`, else SQLite in `dir`) and
/// answers the child and a client of it (a [`TestServer`] whose server is that child).
pub async fn serve(
    dir: &std::path::Path,
    provider: &str,
    log: &std::path::Path,
    database_url: Option<String>,
    extra_env: &[(&str, &str)],
) -> (tokio::process::Child, TestServer) {
    let (child, base, token) = serve_raw(dir, provider, log, database_url, extra_env).await;
    let client = TestServer {
        running: None,
        base,
        token,
        data_dir: dir.to_path_buf(),
        http: reqwest::Client::new(),
    };
    (child, client)
}

async fn serve_raw(
    dir: &std::path::Path,
    provider: &str,
    log: &std::path::Path,
    database_url: Option<String>,
    extra_env: &[(&str, &str)],
) -> (tokio::process::Child, String, String) {
    use tokio::io::AsyncBufReadExt;
    let mut child = tokio::process::Command::new(mulligan_bin())
        .arg("serve")
        .env("MULLIGAN_BIND", "127.0.0.1:0")
        .env("MULLIGAN_DATA_DIR", dir)
        .envs(database_url.map(|u| ("MULLIGAN_DATABASE_URL", u)))
        .env("MULLIGAN_PROVIDER", "openai")
        .env("MULLIGAN_BASE_URL", provider)
        .env("MULLIGAN_API_KEY", API_KEY)
        .env("RUST_LOG", "trace")
        // These tests use the API: the binary `cargo test` builds may have no page to serve.
        .env("MULLIGAN_SITE_OPTIONAL", "true")
        .envs(extra_env.iter().copied())
        .stdout(std::process::Stdio::piped())
        .stderr(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log)
                .unwrap(),
        )
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let url = line
        .split("open ")
        .nth(1)
        .expect("the printed URL")
        .trim()
        .to_string();
    let (base, token) = url.split_once("/?token=").unwrap();
    (child, base.to_string(), token.to_string())
}

/// The `mulligan` binary cargo builds for the server's integration tests, beside the running
/// test (`target/<profile>/mulligan`; the test itself is in `target/<profile>/deps/`).
pub fn mulligan_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let mut dir = exe.parent().expect("the test's directory").to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    dir.join(format!("mulligan{}", std::env::consts::EXE_SUFFIX))
}
