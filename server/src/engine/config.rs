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
    /// Background retries' countdown (Tier 2's policy, served to the browser too).
    pub background: app::wire::Backoff,
    /// Parking behind a model that is out: its probes' backoff and release rate.
    pub parking: crate::retry::parking::Parking,
    /// How often this instance ends the runs it recorded `running` but no longer executes.
    pub reconcile_every: Duration,
    /// How long a tool call waits for the operator's decision before it is `timed_out`.
    pub approval_timeout: Duration,
    /// What a run works with.
    pub run: RunConfig,
}
