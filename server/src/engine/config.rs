//! The engine's settings, taken from the server's configuration.
use crate::config::Config;
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

impl EngineConfig {
    /// The engine's settings from the server's: bounds clamped where zero means nothing
    /// sensible (at least one attempt, one step, one release a second).
    pub fn from_settings(config: &Config, instance: String, default_model: String) -> Self {
        let tier2 = app::wire::Backoff {
            base_ms: config.tier2_base_ms,
            cap_ms: config.tier2_cap_ms,
        };
        EngineConfig {
            instance,
            default_model,
            background: tier2,
            parking: crate::retry::parking::Parking {
                probe: tier2,
                release_per_s: config.release_per_s.max(1),
            },
            reconcile_every: Duration::from_millis(config.reconcile_ms.max(10)),
            approval_timeout: Duration::from_millis(config.approval_timeout_ms.max(1)),
            run: RunConfig {
                stream_idle: Duration::from_millis(config.stream_idle_ms),
                save_every: Duration::from_millis(250),
                delta_window: Duration::from_millis(config.delta_window_ms.min(1000)),
                tier1: crate::retry::policy::Policy {
                    max_attempts: config.tier1_max_attempts.max(1),
                    base: Duration::from_millis(config.tier1_base_ms),
                    cap: Duration::from_millis(config.tier1_cap_ms),
                },
                spend_limit_tokens: config.spend_limit_tokens,
                context_tokens: config.context_tokens,
                max_reply_bytes: config.max_reply_bytes,
                max_run: Duration::from_millis(config.max_run_ms.max(1)),
                max_steps: config.max_steps.max(1),
                tool_timeout: Duration::from_millis(config.tool_timeout_ms.max(1)),
                parking: crate::retry::parking::Parking {
                    probe: tier2,
                    release_per_s: config.release_per_s.max(1),
                },
            },
        }
    }
}
