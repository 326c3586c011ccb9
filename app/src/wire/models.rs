//! Models and providers (CONTRACT §7): what `GET /models` and `GET /providers` carry, and
//! which model answered each step of a run.
use super::text::words;
use super::{Millis, RetryClass};
use serde::{Deserialize, Serialize};

words! {
    /// A model's health as the cooldowns see it.
    open enum ModelStatus {
        /// No cooldown holds it.
        Ok = "ok",
        /// A provider asked to wait; requests resume at `cooling_until`.
        Cooling = "cooling",
        /// Its last probe failed too: an outage, waiting turns parked behind one probe.
        Down = "down",
    }
}

/// One model of the catalogue, as `GET /models` lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct ModelInfo {
    /// `<provider>/<model>`: what a session's `model` and `fallbacks` name.
    pub id: String,
    pub provider: String,
    /// `openai` or `anthropic` (the demo speaks `openai`).
    pub kind: String,
    /// Whether its steps are sent the session's tools.
    pub tools: bool,
    pub status: ModelStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<i64>))]
    pub cooling_until: Option<Millis>,
    /// The catalogue's chain after this model, tried in order before a step's first delta.
    #[serde(default)]
    pub fallbacks: Vec<String>,
}

/// `GET /models` answers this.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct ModelList {
    pub models: Vec<ModelInfo>,
    /// The model of a session created without one.
    #[serde(default)]
    pub default_model: String,
}

/// A model a step passed over before another answered, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct FellBack {
    pub model: String,
    pub retry_class: RetryClass,
}

/// Which model answered one step of a run, and what it fell back from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct Served {
    pub step: u32,
    pub model: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<FellBack>,
}

/// One model's outage as `GET /providers` reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct ProviderHealth {
    pub model: String,
    pub status: ModelStatus,
    /// When its current cooldown began.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<i64>))]
    pub since: Option<Millis>,
    /// Background retries parked behind its probe.
    #[serde(default)]
    pub waiting_turns: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<i64>))]
    pub next_probe_at: Option<Millis>,
}
