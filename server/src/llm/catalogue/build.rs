//! How a catalogue is made: from a `MULLIGAN_PROVIDERS` file (each entry checked, the error
//! saying what to fix) or from the single-provider settings; the demo's entry and chain.
use super::{valid_name, AgentCommand, Catalogue, Kind, ModelRef, ModelSpec, ProviderEntry, DEMO};
use serde::Deserialize;
use std::collections::BTreeMap;

/// The catalogue file, as written (each provider read on its own: `demo` is no entry).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    providers: BTreeMap<String, serde_json::Value>,
    #[serde(default)]
    default_model: Option<String>,
    #[serde(default)]
    fallbacks: BTreeMap<String, Vec<String>>,
}

/// The scenario models of the demo provider (see `llm::demo::SCENARIOS`).
fn demo_entry() -> ProviderEntry {
    ProviderEntry {
        kind: Kind::Openai,
        base_url: None,
        api_key_env: None,
        headers: BTreeMap::new(),
        models: crate::llm::demo::SCENARIOS
            .iter()
            .map(|(id, _)| ModelSpec {
                id: id.to_string(),
                context_tokens: None,
                tools: true,
            })
            .collect(),
        open: false,
        demo: true,
        agent: None,
    }
}

/// An entry of kind `acp`, as written: the agent's command and its models (`default`, the
/// agent's own choice, when none are listed).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AcpEntry {
    #[allow(dead_code)]
    kind: Kind,
    command: String,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    env_from: BTreeMap<String, String>,
    #[serde(default)]
    cwd: Option<String>,
    #[serde(default)]
    authenticate: Option<String>,
    #[serde(default)]
    models: Vec<ModelSpec>,
}

/// The entry of an `acp` provider named `name`, checked.
fn acp_entry(name: &str, raw: serde_json::Value) -> Result<ProviderEntry, String> {
    let AcpEntry {
        command,
        args,
        env,
        env_from,
        cwd,
        authenticate,
        models,
        ..
    } = serde_json::from_value(raw).map_err(|e| format!("provider {name:?}: {e}"))?;
    let agent = AgentCommand {
        command,
        args,
        env,
        env_from,
        cwd,
        authenticate: authenticate.filter(|m| !m.trim().is_empty()),
    };
    if agent.command.trim().is_empty() {
        return Err(format!("provider {name:?}: \"command\" is empty"));
    }
    for var in agent
        .env
        .keys()
        .chain(agent.env_from.keys())
        .chain(agent.env_from.values())
    {
        if var.is_empty() || var.contains('=') || var.contains('\0') {
            return Err(format!(
                "provider {name:?}: {var:?} is not a variable name (empty, or with '=' or NUL)"
            ));
        }
    }
    let models = if models.is_empty() {
        vec![ModelSpec {
            id: "default".into(),
            context_tokens: None,
            tools: true,
        }]
    } else {
        models
    };
    Ok(ProviderEntry {
        kind: Kind::Acp,
        base_url: None,
        api_key_env: None,
        headers: BTreeMap::new(),
        models,
        open: false,
        demo: false,
        agent: Some(agent),
    })
}

impl Catalogue {
    /// The catalogue of a `MULLIGAN_PROVIDERS` file, with the built-in demo only when the
    /// file names it (`"demo": {}`: its endpoint is then served); the error says what to fix.
    pub fn parse(text: &str) -> Result<Catalogue, String> {
        let file: File = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let mut providers = BTreeMap::new();
        let mut demo = false;
        for (name, raw) in file.providers {
            if !valid_name(&name) {
                return Err(format!(
                    "provider name {name:?}: names are 1 to 32 of a-z, 0-9, _ and -"
                ));
            }
            if name == DEMO {
                if !raw.as_object().is_some_and(|o| o.is_empty()) {
                    return Err(format!(
                        "provider name {DEMO:?} is the built-in demo's: \"{DEMO}\": {{}} serves it, with no settings"
                    ));
                }
                demo = true;
                continue;
            }
            let entry: ProviderEntry = if raw.get("kind").and_then(|k| k.as_str()) == Some("acp") {
                acp_entry(&name, raw)?
            } else {
                serde_json::from_value(raw).map_err(|e| format!("provider {name:?}: {e}"))?
            };
            if entry.models.is_empty() {
                return Err(format!("provider {name:?} lists no models"));
            }
            if let Some(m) = entry.models.iter().find(|m| m.id.trim().is_empty()) {
                return Err(format!(
                    "provider {name:?} has a model with an empty id {m:?}"
                ));
            }
            if let Some(var) = &entry.api_key_env {
                if var.is_empty() || var.contains('=') {
                    return Err(format!(
                        "provider {name:?}: api_key_env {var:?} is not a variable name"
                    ));
                }
            }
            providers.insert(name, entry);
        }
        if demo {
            providers.insert(DEMO.to_string(), demo_entry());
        }
        if providers.is_empty() {
            return Err(format!(
                "the file lists no providers (\"{DEMO}\": {{}} is the built-in demo)"
            ));
        }
        let mut catalogue = Catalogue {
            default_model: ModelRef {
                provider: DEMO.into(),
                model: DEMO.into(),
            },
            providers,
            fallbacks: BTreeMap::new(),
        };
        catalogue.default_model = match &file.default_model {
            Some(m) => catalogue
                .resolve(m)
                .map_err(|e| format!("default_model: {e}"))?,
            None => catalogue
                .providers
                .iter()
                .find(|(name, _)| *name != DEMO)
                .and_then(|(name, e)| {
                    e.models.first().map(|m| ModelRef {
                        provider: name.clone(),
                        model: m.id.clone(),
                    })
                })
                .unwrap_or(catalogue.default_model),
        };
        for (from, chain) in &file.fallbacks {
            let from = catalogue
                .resolve(from)
                .map_err(|e| format!("fallbacks: {e}"))?;
            let chain = catalogue
                .resolve_chain(chain)
                .map_err(|e| format!("fallbacks of {from}: {e}"))?;
            catalogue.fallbacks.insert(from, chain);
        }
        catalogue.add_demo_chain();
        Ok(catalogue)
    }

    /// The one-entry catalogue of the single-provider settings (`MULLIGAN_PROVIDER`, …):
    /// `kind` `None` is the demo alone.
    pub fn single(kind: Option<Kind>, base_url: Option<String>, model: &str) -> Catalogue {
        let mut providers = BTreeMap::new();
        if kind.is_none() {
            providers.insert(DEMO.to_string(), demo_entry());
        }
        let default_model = match kind {
            None => {
                // The demo alone takes every model name, as it always did (unknown names
                // play its healthy reply).
                if let Some(demo) = providers.get_mut(DEMO) {
                    demo.open = true;
                }
                ModelRef {
                    provider: DEMO.into(),
                    model: model.to_string(),
                }
            }
            Some(kind) => {
                let name = kind.as_str().to_string();
                providers.insert(
                    name.clone(),
                    ProviderEntry {
                        kind,
                        base_url,
                        api_key_env: None,
                        headers: BTreeMap::new(),
                        models: vec![ModelSpec {
                            id: model.to_string(),
                            context_tokens: None,
                            tools: true,
                        }],
                        open: true,
                        demo: false,
                        agent: None,
                    },
                );
                ModelRef {
                    provider: name,
                    model: model.to_string(),
                }
            }
        };
        let mut catalogue = Catalogue {
            providers,
            default_model,
            fallbacks: BTreeMap::new(),
        };
        catalogue.add_demo_chain();
        catalogue
    }

    /// `demo/demo-overloaded` falls back to `demo/demo`, so a newcomer sees a fallback offline.
    fn add_demo_chain(&mut self) {
        if !self.providers.contains_key(DEMO) {
            return;
        }
        let overloaded = ModelRef {
            provider: DEMO.into(),
            model: "demo-overloaded".into(),
        };
        self.fallbacks.entry(overloaded).or_insert_with(|| {
            vec![ModelRef {
                provider: DEMO.into(),
                model: DEMO.into(),
            }]
        });
    }
}
