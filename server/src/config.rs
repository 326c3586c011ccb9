//! Settings (CONTRACT §1): flags, then environment, then defaults.
use clap::{Args, ValueEnum};
use std::net::SocketAddr;
use std::path::PathBuf;

/// On PostgreSQL, every connection one instance opens, whatever its load, unless the
/// operator sets another budget (`MULLIGAN_DATABASE_MAX_CONNECTIONS`): the main pool gets
/// all but `store::SIDE_CONNECTIONS` of it. Four instances at the default fit in PostgreSQL's
/// stock `max_connections = 100` with room for an administrator.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ProviderKind {
    Demo,
    Openai,
    Anthropic,
}

/// How often a reply's deltas go out at most by default, in ms: about 30 a second, so a
/// provider streaming a token a millisecond costs each subscriber (a browser tab above all:
/// every event is a task on its main thread, bench B10) 30 events a second instead of 1,000,
/// and a delta waits at most this long. Slower providers (a token every 33 ms or more) are
/// not held back at all.
pub const DEFAULT_DELTA_WINDOW_MS: u64 = 33;

/// The most parked turns a model may release per second: the release interval is whole
/// milliseconds, so a higher rate would make it 0, that is no limit at all.
pub const MAX_RELEASE_PER_S: u32 = 1000;

/// Everything `mulligan serve` needs.
#[derive(Clone, Debug, Args)]
pub struct Config {
    /// Listen address.
    #[arg(long, env = "MULLIGAN_BIND", default_value = "127.0.0.1:3000")]
    pub bind: SocketAddr,
    /// `sqlite://…` (default: `sqlite://<data dir>/mulligan.db`) or `postgres://…`.
    #[arg(long, env = "MULLIGAN_DATABASE_URL")]
    pub database_url: Option<String>,
    /// Where the default database and the generated token live.
    #[arg(long, env = "MULLIGAN_DATA_DIR", default_value = "./data")]
    pub data_dir: PathBuf,
    /// Operator bearer token (default: generated once, kept in the data dir).
    #[arg(long, env = "MULLIGAN_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// The provider catalogue (CONTRACT §7): a JSON file of several providers, their models
    /// and fallback chains. Without it, the single-provider settings below are its one entry.
    #[arg(long, env = "MULLIGAN_PROVIDERS")]
    pub providers: Option<PathBuf>,
    /// Which provider runs the agent (without a catalogue file).
    #[arg(long, env = "MULLIGAN_PROVIDER", value_enum, default_value = "demo")]
    pub provider: ProviderKind,
    /// Provider base URL, e.g. `http://127.0.0.1:8000/v1`.
    #[arg(long, env = "MULLIGAN_BASE_URL")]
    pub base_url: Option<String>,
    /// Provider API key; never logged, never returned.
    #[arg(long, env = "MULLIGAN_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Default model of new sessions.
    #[arg(long, env = "MULLIGAN_MODEL")]
    pub model: Option<String>,
    #[arg(long, env = "MULLIGAN_TIER1_MAX_ATTEMPTS", default_value_t = 3)]
    pub tier1_max_attempts: u32,
    #[arg(long, env = "MULLIGAN_TIER1_BASE_MS", default_value_t = 1000)]
    pub tier1_base_ms: u64,
    #[arg(long, env = "MULLIGAN_TIER1_CAP_MS", default_value_t = 30_000)]
    pub tier1_cap_ms: u64,
    #[arg(long, env = "MULLIGAN_TIER2_BASE_MS", default_value_t = app::wire::Backoff::CONTRACT.base_ms)]
    pub tier2_base_ms: u64,
    #[arg(long, env = "MULLIGAN_TIER2_CAP_MS", default_value_t = app::wire::Backoff::CONTRACT.cap_ms)]
    pub tier2_cap_ms: u64,
    /// Background retries parked behind a model that is out go at most this many per second
    /// per model once its probe succeeded (the whole fleet together).
    #[arg(long, env = "MULLIGAN_RELEASE_PER_S", default_value_t = 2)]
    pub release_per_s: u32,
    /// Per-session token budget.
    #[arg(long, env = "MULLIGAN_SPEND_LIMIT_TOKENS")]
    pub spend_limit_tokens: Option<u64>,
    /// Context window used for compaction (default: the provider's).
    #[arg(long, env = "MULLIGAN_CONTEXT_TOKENS")]
    pub context_tokens: Option<u64>,
    /// No bytes this long mid-stream ends the run as `stream_interrupted`.
    #[arg(long, env = "MULLIGAN_STREAM_IDLE_MS", default_value_t = 60_000)]
    pub stream_idle_ms: u64,
    /// A reply's deltas go out at most once in this long: text a provider streams sooner
    /// goes out with the next one (0: each provider delta as it comes). Text faster than
    /// anyone reads goes out at most once in three windows.
    #[arg(long, env = "MULLIGAN_DELTA_WINDOW_MS", default_value_t = DEFAULT_DELTA_WINDOW_MS)]
    pub delta_window_ms: u64,
    /// The longest wait a provider may advise (`Retry-After`, `retry-after-ms`, reset
    /// headers); a longer one is taken as this. Cooldowns never last longer.
    #[arg(
        long,
        env = "MULLIGAN_MAX_ADVISED_WAIT_MS",
        default_value_t = 86_400_000
    )]
    pub max_advised_wait_ms: u64,
    /// How long a provider may take to answer a call (status line and headers) before the
    /// attempt fails as `timeout` and Tier 1 goes on.
    #[arg(long, env = "MULLIGAN_HEADER_TIMEOUT_MS", default_value_t = 60_000)]
    pub header_timeout_ms: u64,
    /// The largest SSE line or event a provider may send; a larger one fails the attempt.
    #[arg(long, env = "MULLIGAN_MAX_EVENT_BYTES", default_value_t = 1_048_576)]
    pub max_event_bytes: usize,
    /// The longest reply a run may stream; a longer one fails `reply_too_large`.
    #[arg(long, env = "MULLIGAN_MAX_REPLY_BYTES", default_value_t = 1_048_576)]
    pub max_reply_bytes: usize,
    /// The longest a run may take from its start; a longer one fails `timeout`.
    #[arg(long, env = "MULLIGAN_MAX_RUN_MS", default_value_t = 3_600_000)]
    pub max_run_ms: u64,
    /// Where the page's built files are (cargo-leptos' site root). Default: `site` beside the
    /// binary, else `../site` from it, else `./target/site`; `serve` refuses to start
    /// without them.
    #[arg(long, env = "LEPTOS_SITE_ROOT")]
    pub site_root: Option<PathBuf>,
    /// Start even when the page's files are nowhere (the API and MCP still work).
    #[arg(long, env = "MULLIGAN_SITE_OPTIONAL")]
    pub site_optional: bool,
    /// PostgreSQL: every connection this instance opens, whatever its load (4 of them are
    /// the heartbeat's, the event writer's and the two listeners'; the rest are the main pool).
    #[arg(long, env = "MULLIGAN_DATABASE_MAX_CONNECTIONS", default_value_t = DEFAULT_MAX_CONNECTIONS)]
    pub database_max_connections: u32,
    /// How often each instance ends runs it recorded `running` but no longer executes.
    #[arg(long, env = "MULLIGAN_RECONCILE_MS", default_value_t = 30_000)]
    pub reconcile_ms: u64,
    /// MCP servers for agent turns: a JSON file in the `mcpServers` format MCP clients use.
    #[arg(long, env = "MULLIGAN_MCP_CONFIG")]
    pub mcp_config: Option<PathBuf>,
    /// Model steps per turn; a turn still asking for tools after them fails `max_steps`.
    #[arg(long, env = "MULLIGAN_MAX_STEPS", default_value_t = 20)]
    pub max_steps: u32,
    /// One tool call's limit; a longer call ends as an error result the model sees.
    #[arg(long, env = "MULLIGAN_TOOL_TIMEOUT_MS", default_value_t = 120_000)]
    pub tool_timeout_ms: u64,
    /// How long a tool call waits for the operator's decision before it is `timed_out`
    /// (a rejection the model is told of).
    #[arg(
        long,
        env = "MULLIGAN_APPROVAL_TIMEOUT_MS",
        default_value_t = 86_400_000
    )]
    pub approval_timeout_ms: u64,
    /// ACP agent processes running at once (CONTRACT §9); the longest idle stops to make room.
    #[arg(long, env = "MULLIGAN_ACP_MAX_PROCESSES", default_value_t = 8)]
    pub acp_max_processes: usize,
    /// An ACP agent process idle this long is stopped (the next turn starts it again).
    #[arg(long, env = "MULLIGAN_ACP_IDLE_MS", default_value_t = 600_000)]
    pub acp_idle_ms: u64,
    /// Milliseconds between two deltas of the demo provider (its "human pace").
    #[arg(long, env = "MULLIGAN_DEMO_DELTA_MS", default_value_t = 40)]
    pub demo_delta_ms: u64,
}

impl Config {
    /// The settings a test or a library user starts from: all defaults, data in `data_dir`.
    pub fn for_data_dir(data_dir: impl Into<PathBuf>) -> Self {
        use clap::Parser;
        #[derive(Parser)]
        struct Wrap {
            #[command(flatten)]
            c: Config,
        }
        let mut c = Wrap::parse_from(["mulligan"]).c;
        c.data_dir = data_dir.into();
        c
    }

    /// The settings a value of their type may still get wrong, refused at start; the error
    /// names the setting and what it takes.
    pub fn check(&self) -> Result<(), String> {
        if !(1..=MAX_RELEASE_PER_S).contains(&self.release_per_s) {
            return Err(format!(
                "MULLIGAN_RELEASE_PER_S (--release-per-s) is {}: it takes 1 to {MAX_RELEASE_PER_S} \
                 (parked turns released per second per model)",
                self.release_per_s
            ));
        }
        Ok(())
    }

    pub fn database_url(&self) -> String {
        self.database_url
            .clone()
            .unwrap_or_else(|| format!("sqlite://{}", self.data_dir.join("mulligan.db").display()))
    }

    pub fn default_model(&self) -> String {
        self.model.clone().unwrap_or_else(|| {
            match self.provider {
                ProviderKind::Demo => "demo",
                ProviderKind::Openai => "gpt-4o-mini",
                ProviderKind::Anthropic => "claude-sonnet-4-5",
            }
            .to_string()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_release_rate_of_0_or_past_1000_is_refused_naming_the_setting() {
        let mut c = Config::for_data_dir("unused");
        assert_eq!(c.check(), Ok(()), "the default");
        for ok in [1, MAX_RELEASE_PER_S] {
            c.release_per_s = ok;
            assert_eq!(c.check(), Ok(()), "{ok}");
        }
        for bad in [0, MAX_RELEASE_PER_S + 1, u32::MAX] {
            c.release_per_s = bad;
            let e = c.check().expect_err("refused");
            assert!(
                e.contains("MULLIGAN_RELEASE_PER_S") && e.contains(&bad.to_string()),
                "{e}"
            );
            assert!(e.contains("takes 1 to 1000"), "{e}");
        }
    }
}
