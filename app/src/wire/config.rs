//! What the browser is told of the server (`/config`) and the provider cooldowns (`/providers`).
use super::{Millis, RetryClass};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct ClientConfig {
    pub tier2_base_ms: u64,
    pub tier2_cap_ms: u64,
    /// Tier 1's attempts per run, for "attempt 2 of 3".
    #[serde(default)]
    pub tier1_max_attempts: u32,
}

/// A provider-wide cooldown: every run for `key` fails without a request until `until`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct Cooldown {
    /// Provider, endpoint, model and a short hash of the API key, never the key:
    /// `openai https://api.openai.com/v1 model=gpt-4o-mini key=sha256:ab12cd34ef56`.
    pub key: String,
    #[cfg_attr(feature = "openapi", schema(value_type = i64))]
    pub until: Millis,
    /// The class of the answer that advised the wait: `rate_limited`, `overloaded` or
    /// `quota_exhausted`.
    pub reason: RetryClass,
}

/// `GET /providers` (and `DELETE /providers/cooldowns`) answers this.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct ProvidersResponse {
    pub cooldowns: Vec<Cooldown>,
    /// Each model not `ok`: its outage and the turns parked behind its probe (CONTRACT §7).
    #[serde(default)]
    pub models: Vec<super::ProviderHealth>,
}

/// `DELETE /providers/cooldowns`: which cooldown to end, by its shown key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct ClearCooldown {
    pub key: String,
}

/// Tier 2's countdown schedule (CONTRACT §3: from `base_ms`, doubling, capped at `cap_ms`):
/// one definition for the browser's state machine and the server's background retries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    pub base_ms: u64,
    pub cap_ms: u64,
}

impl Backoff {
    /// The contract's schedule and the default: 2 s, doubling, capped at 300 s.
    pub const CONTRACT: Backoff = Backoff {
        base_ms: 2000,
        cap_ms: 300_000,
    };

    /// The countdown before retry `attempt` (1-based): `min(cap, base·2^(attempt-1))`.
    ///
    /// ```
    /// use app::wire::Backoff;
    /// let delays: Vec<u64> = (1..=10).map(|n| Backoff::CONTRACT.delay_ms(n)).collect();
    /// assert_eq!(
    ///     delays,
    ///     [2_000, 4_000, 8_000, 16_000, 32_000, 64_000, 128_000, 256_000, 300_000, 300_000]
    /// );
    /// // Unlimited: the thousandth retry still waits the cap, no overflow.
    /// assert_eq!(Backoff::CONTRACT.delay_ms(1_000), 300_000);
    /// ```
    pub fn delay_ms(&self, attempt: u32) -> u64 {
        let shift = attempt.saturating_sub(1).min(40);
        self.base_ms
            .saturating_mul(1u64 << shift)
            .min(self.cap_ms)
            .max(self.base_ms.min(self.cap_ms))
    }
}
