//! The provider catalogue (CONTRACT §7): which providers and models there are, how a
//! session's `model` names one, and each model's fallback chain. Pure: read from the
//! `MULLIGAN_PROVIDERS` file or made from the single-provider settings; the demo is in
//! (and its endpoint served) with `MULLIGAN_PROVIDER=demo` and no file, or when the file
//! names it (`"demo": {}`).
mod build;
mod resolve;

use serde::Deserialize;
use std::collections::BTreeMap;

/// The demo provider's entry name (always in the catalogue).
pub const DEMO: &str = "demo";
/// The longest chain a model or a session may name.
pub const MAX_FALLBACKS: usize = 8;

/// How a provider is spoken to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Openai,
    Anthropic,
    /// An agent over the Agent Client Protocol (CONTRACT §9): its entry's `agent`.
    Acp,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Openai => "openai",
            Kind::Anthropic => "anthropic",
            Kind::Acp => "acp",
        }
    }
}

/// One model a provider serves.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSpec {
    pub id: String,
    #[serde(default)]
    pub context_tokens: Option<u64>,
    /// `false`: its steps are sent no tools.
    #[serde(default = "yes")]
    pub tools: bool,
}

fn yes() -> bool {
    true
}

/// One provider of the catalogue.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderEntry {
    pub kind: Kind,
    #[serde(default)]
    pub base_url: Option<String>,
    /// The environment variable holding its API key (the key is never in the file).
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Extra request headers; their values are secrets to the redactor (a gateway's key).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    pub models: Vec<ModelSpec>,
    /// Any model id is this provider's when no entry lists it (the single-provider
    /// settings, where `MULLIGAN_MODEL` names one model but a session may ask for others).
    #[serde(skip)]
    pub open: bool,
    /// Mulligan's own demo endpoint.
    #[serde(skip)]
    pub demo: bool,
    /// Kind `acp`: how the agent is started.
    #[serde(skip)]
    pub agent: Option<AgentCommand>,
}

/// How an ACP agent is started (CONTRACT §9): its command, arguments, the variables it gets
/// besides the clean environment (§6), and the directory its sessions work in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentCommand {
    pub command: String,
    pub args: Vec<String>,
    /// Its own variables, written out; their values are secrets to the redactor.
    pub env: BTreeMap<String, String>,
    /// Its variables taken from Mulligan's environment by name (`{"ANTHROPIC_API_KEY":
    /// "MULLIGAN_CLAUDE_KEY"}`), so no key is written in the file.
    pub env_from: BTreeMap<String, String>,
    /// Where its sessions work (`session/new`'s `cwd`); Mulligan's own directory if unset.
    pub cwd: Option<String>,
    /// The auth method Mulligan picks with `authenticate` after `initialize`, for an agent
    /// that wants one before a session (Codex's `openai-api-key` reads `OPENAI_API_KEY`).
    pub authenticate: Option<String>,
}

/// A model as a session names it once resolved: `<provider>/<model>`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ModelRef {
    pub provider: String,
    pub model: String,
}

impl ModelRef {
    pub fn id(&self) -> String {
        format!("{}/{}", self.provider, self.model)
    }
}

impl std::fmt::Display for ModelRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.provider, self.model)
    }
}

/// Every provider and model the server can call, and the chains between them.
#[derive(Clone, Debug, PartialEq)]
pub struct Catalogue {
    providers: BTreeMap<String, ProviderEntry>,
    default_model: ModelRef,
    /// By `<provider>/<model>`, resolved.
    fallbacks: BTreeMap<ModelRef, Vec<ModelRef>>,
}

/// Whether `name` may name a provider: `[a-z0-9_-]{1,32}`.
pub fn valid_name(name: &str) -> bool {
    (1..=32).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

impl Catalogue {
    pub fn default_model(&self) -> &ModelRef {
        &self.default_model
    }

    pub fn providers(&self) -> impl Iterator<Item = (&str, &ProviderEntry)> {
        self.providers.iter().map(|(n, e)| (n.as_str(), e))
    }

    pub fn provider(&self, name: &str) -> Option<&ProviderEntry> {
        self.providers.get(name)
    }

    /// Every listed model, provider by provider.
    pub fn models(&self) -> impl Iterator<Item = (ModelRef, &ProviderEntry, &ModelSpec)> {
        self.providers.iter().flat_map(|(name, entry)| {
            entry.models.iter().map(move |m| {
                (
                    ModelRef {
                        provider: name.clone(),
                        model: m.id.clone(),
                    },
                    entry,
                    m,
                )
            })
        })
    }
}

#[cfg(test)]
mod tests;
