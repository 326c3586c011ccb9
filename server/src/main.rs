//! `mulligan`: the server (`serve`) and the CONTRACT §4 thin clients of its API (see `cli`).
mod cli;

use clap::{Parser, Subcommand};
use server::config::Config;

#[derive(Parser)]
#[command(
    name = "mulligan",
    version,
    about = "LLM agent sessions that recover from provider failures"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the web app and the API (prints the URL to open).
    Serve(Box<Config>),
    #[command(flatten)]
    Client(cli::Command),
}

fn main() -> std::process::ExitCode {
    let mut config = match Cli::parse().command {
        Command::Serve(config) => *config,
        Command::Client(cmd) => return cli::run(cmd),
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,sqlx=warn,leptos=warn".into()),
        )
        .with_writer(std::io::stderr)
        // Colours only for a person at a terminal: a log file or journal gets plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    // Only `serve` serves the page, so only it needs the page's files (`server::site`).
    match server::site::locate(config.site_root.as_deref()) {
        Ok(dir) => config.site_root = Some(dir),
        Err(missing) if config.site_optional => {
            tracing::warn!("serving without the page (MULLIGAN_SITE_OPTIONAL): {missing}")
        }
        Err(missing) => {
            eprintln!("mulligan: {missing}");
            return std::process::ExitCode::FAILURE;
        }
    }
    let rt = tokio::runtime::Runtime::new().expect("the tokio runtime starts");
    rt.block_on(async move {
        match server::start(config, true).await {
            Ok(running) => {
                println!("Mulligan is running: open {}", running.open_url());
                running.wait().await;
                std::process::ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("mulligan: {e}");
                std::process::ExitCode::FAILURE
            }
        }
    })
}
