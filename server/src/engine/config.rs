//! The engine's settings, taken from the server's configuration.
use crate::run::RunConfig;
use std::time::Duration;

/// Engine settings taken from the server's configuration.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// This instance's id: the owner recorded on the runs it executes.
    pub instance: String,
    /// The model of a session created without one.
    pub default_model: String,
    pub stream_idle: Duration,
    /// How often streamed text is saved (the stored reply is never further behind).
    pub save_every: Duration,
    pub tier1: crate::retry::policy::Policy,
    /// Per-session token budget.
    pub spend_limit_tokens: Option<u64>,
    /// Context window used for compaction (`None`: drop the older half).
    pub context_tokens: Option<u64>,
    /// The longest reply a run may stream (bytes); past it the run fails `reply_too_large`.
    pub max_reply_bytes: usize,
    /// The longest a run may take from its start; past it the run fails `timeout`.
    pub max_run: Duration,
    /// Background retries' countdown (Tier 2's policy, served to the browser too).
    pub background: app::wire::Backoff,
    /// How often this instance ends the runs it recorded `running` but no longer executes.
    pub reconcile_every: Duration,
    /// Model steps per turn; past them the run fails `max_steps`.
    pub max_steps: u32,
    /// One tool call's limit.
    pub tool_timeout: Duration,
}

impl EngineConfig {
    /// What of these settings a run works with.
    pub fn run(&self) -> RunConfig {
        RunConfig {
            stream_idle: self.stream_idle,
            save_every: self.save_every,
            tier1: self.tier1,
            spend_limit_tokens: self.spend_limit_tokens,
            context_tokens: self.context_tokens,
            max_reply_bytes: self.max_reply_bytes,
            max_run: self.max_run,
            max_steps: self.max_steps,
            tool_timeout: self.tool_timeout,
        }
    }
}
