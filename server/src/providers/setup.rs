//! Builds the providers a server calls from its settings: the catalogue (the
//! `MULLIGAN_PROVIDERS` file, or the single-provider settings), each provider's API key from
//! the environment, one HTTP client per provider, each behind its own cooldown gate.
use super::models::Models;
use super::router::{Providers, Router};
use crate::acp_client::{AgentSpec, Agents, PoolLimits};
use crate::config::{Config, ProviderKind};
use crate::llm::catalogue::{AgentCommand, Catalogue, Kind, ProviderEntry, DEMO};
use crate::llm::{anthropic, openai, redacted::Redacted, Provider};
use crate::redact::Redactor;
use crate::retry::{cooldown, gate::Gate};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// The catalogue the settings describe and each provider's API key (by provider name).
pub struct Catalogued {
    pub catalogue: Catalogue,
    keys: BTreeMap<String, String>,
    /// Whether it came from a file (sessions then name models `<provider>/<model>`).
    pub from_file: bool,
}

impl Catalogued {
    /// Every API key and every provider `headers` value (a gateway's `api-key`, an
    /// `Authorization`), for the redactor.
    pub fn secrets(&self) -> impl Iterator<Item = String> + '_ {
        let headers = self
            .catalogue
            .providers()
            .flat_map(|(_, entry)| entry.headers.values().cloned());
        // An agent's variables: written out, or taken from Mulligan's environment by name.
        let agents = self
            .catalogue
            .providers()
            .filter_map(|(_, entry)| entry.agent.as_ref())
            .flat_map(|a| {
                let from = a.env_from.values().filter_map(|v| std::env::var(v).ok());
                a.env.values().cloned().chain(from).collect::<Vec<_>>()
            })
            .filter(|v| v.len() >= 8);
        self.keys.values().cloned().chain(headers).chain(agents)
    }

    /// Whether the demo provider is one the operator runs: its endpoint is served then only.
    pub fn serves_demo(&self) -> bool {
        self.catalogue.provider(DEMO).is_some_and(|e| e.demo)
    }

    /// The model a session created without one gets: the catalogue's default as
    /// `<provider>/<model>`, or the single-provider settings' model as they name it.
    pub fn default_model(&self, config: &Config) -> String {
        if self.from_file {
            self.catalogue.default_model().id()
        } else {
            config.default_model()
        }
    }
}

/// Reads the catalogue the settings name; the error says what to fix in the file.
pub fn catalogue(config: &Config) -> Result<Catalogued, String> {
    let Some(path) = &config.providers else {
        let kind = match config.provider {
            ProviderKind::Demo => None,
            ProviderKind::Openai => Some(Kind::Openai),
            ProviderKind::Anthropic => Some(Kind::Anthropic),
        };
        let catalogue = Catalogue::single(kind, config.base_url.clone(), &config.default_model());
        let mut keys = BTreeMap::new();
        if let (Some(kind), Some(key)) = (kind, config.api_key.clone()) {
            keys.insert(kind.as_str().to_string(), key);
        }
        return Ok(Catalogued {
            catalogue,
            keys,
            from_file: false,
        });
    };
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    // The demo is in (and its endpoint served) only when the file names it.
    let catalogue = Catalogue::parse(&text)?;
    let mut keys = BTreeMap::new();
    for (name, entry) in catalogue.providers() {
        let Some(var) = &entry.api_key_env else {
            continue;
        };
        match std::env::var(var) {
            Ok(key) if !key.is_empty() => {
                keys.insert(name.to_string(), key);
            }
            _ => {
                tracing::warn!(provider = name, variable = %var, "the provider's API key variable is unset: its calls fail credentials_unresolved")
            }
        }
    }
    Ok(Catalogued {
        catalogue,
        keys,
        from_file: true,
    })
}

/// Every provider of the catalogue, routed by model, errors redacted.
pub fn providers(
    config: &Config,
    catalogued: Catalogued,
    addr: SocketAddr,
    cooldowns: Arc<dyn cooldown::Table>,
    redactor: Redactor,
) -> Providers {
    let limits = limits(config);
    let mut gates: BTreeMap<String, Arc<dyn Provider>> = BTreeMap::new();
    let mut keys = BTreeMap::new();
    for (name, entry) in catalogued.catalogue.providers() {
        if entry.kind == Kind::Acp {
            continue; // an agent runs its turns itself (`acp_client`), not through a request
        }
        let base = base_url(entry, addr);
        let api_key = catalogued.keys.get(name).cloned();
        let client = client(entry);
        let provider: Arc<dyn Provider> = match entry.kind {
            _ if entry.demo => Arc::new(openai::OpenAi::new(client, &base, None, false, limits)),
            Kind::Openai => {
                // A key is required where one is named (or where the single-provider settings
                // always required it); a local server without one is called without.
                let requires = entry.api_key_env.is_some() || !catalogued.from_file;
                Arc::new(openai::OpenAi::new(
                    client,
                    &base,
                    api_key.clone(),
                    requires,
                    limits,
                ))
            }
            Kind::Anthropic => Arc::new(anthropic::Anthropic::new(
                client,
                &base,
                api_key.clone(),
                limits,
            )),
            Kind::Acp => continue,
        };
        let key = cooldown::Key::new(name, &base, api_key.as_deref(), "");
        let gate = Gate::new(
            provider,
            cooldowns.clone(),
            key.clone(),
            limits.max_advised_wait,
        );
        gates.insert(name.to_string(), Arc::new(gate));
        keys.insert(name.to_string(), key);
    }
    let agents = agents(config, &catalogued.catalogue);
    let models = Arc::new(Models::new(catalogued.catalogue, keys, cooldowns));
    let router = Router::new(models.clone(), gates);
    Providers {
        send: Arc::new(Redacted::new(Arc::new(router), redactor)),
        models,
        agents,
    }
}

/// Where a provider is called: its `base_url`, else its kind's public API (the demo: this
/// server's own `/demo/v1`).
fn base_url(entry: &ProviderEntry, addr: SocketAddr) -> String {
    if let Some(base) = &entry.base_url {
        return base.clone();
    }
    if entry.demo {
        let host = if addr.ip().is_unspecified() {
            "127.0.0.1".to_string()
        } else {
            addr.ip().to_string()
        };
        return format!("http://{host}:{}/demo/v1", addr.port());
    }
    match entry.kind {
        Kind::Openai => openai::DEFAULT_BASE_URL.to_string(),
        Kind::Anthropic => anthropic::DEFAULT_BASE_URL.to_string(),
        Kind::Acp => String::new(),
    }
}

/// A provider's HTTP client, with its extra headers on every request.
fn client(entry: &ProviderEntry) -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    for (name, value) in &entry.headers {
        match (
            reqwest::header::HeaderName::from_bytes(name.as_bytes()),
            reqwest::header::HeaderValue::from_str(value),
        ) {
            (Ok(n), Ok(mut v)) => {
                // A header value may be a credential: kept out of reqwest's Debug output.
                v.set_sensitive(true);
                headers.insert(n, v);
            }
            _ => {
                tracing::warn!(header = %name, "a provider header is not a valid HTTP header: left out")
            }
        }
    }
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .default_headers(headers)
        .build()
        .unwrap_or_else(|e| {
            tracing::error!(error = %e, "the provider's HTTP client did not build; using the default one");
            reqwest::Client::new()
        })
}

/// The demo provider alone, for tests of the engine: `send` is the given provider.
pub fn only(send: Arc<dyn Provider>) -> Providers {
    let catalogue = Catalogue::single(None, None, DEMO);
    let key = cooldown::Key::new(DEMO, "demo", None, "");
    let models = Models::new(
        catalogue,
        BTreeMap::from([(DEMO.to_string(), key)]),
        Arc::new(cooldown::Cooldowns::default()),
    );
    Providers {
        send,
        models: Arc::new(models),
        agents: Agents::new(BTreeMap::new(), PoolLimits::default()),
    }
}

/// The catalogue's agents, each with its variables resolved (an `env_from` variable that is
/// unset is left out, with a warning).
fn agents(config: &Config, catalogue: &Catalogue) -> Agents {
    let specs = catalogue
        .providers()
        .filter_map(|(name, entry)| Some((name, entry.agent.as_ref()?)))
        .map(|(name, agent)| (name.to_string(), agent_spec(name, agent)))
        .collect();
    Agents::new(
        specs,
        PoolLimits {
            max_processes: config.acp_max_processes.max(1),
            idle: Duration::from_millis(config.acp_idle_ms.max(1)),
        },
    )
}

fn agent_spec(name: &str, agent: &AgentCommand) -> AgentSpec {
    let mut env = agent.env.clone();
    for (var, from) in &agent.env_from {
        match std::env::var(from) {
            Ok(value) if !value.is_empty() => {
                env.insert(var.clone(), value);
            }
            _ => {
                tracing::warn!(provider = name, variable = %from, "an agent's env_from variable is unset: the agent starts without {var}")
            }
        }
    }
    AgentSpec {
        command: agent.command.clone(),
        args: agent.args.clone(),
        env,
        cwd: agent.cwd.as_ref().map(std::path::PathBuf::from),
        authenticate: agent.authenticate.clone(),
    }
}

/// What every provider call is held to, from the settings.
fn limits(config: &Config) -> crate::llm::Limits {
    crate::llm::Limits {
        max_advised_wait: std::time::Duration::from_millis(config.max_advised_wait_ms),
        header_timeout: std::time::Duration::from_millis(config.header_timeout_ms.max(1)),
        max_event_bytes: config.max_event_bytes.max(1024),
    }
}
