//! The provider catalogue (CONTRACT §7): which providers and models there are, how a
//! session's `model` names one, and each model's fallback chain. Pure: read from the
//! `MULLIGAN_PROVIDERS` file or made from the single-provider settings; the demo is in
//! (and its endpoint served) with `MULLIGAN_PROVIDER=demo` and no file, or when the file
//! names it (`"demo": {}`).
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
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Openai => "openai",
            Kind::Anthropic => "anthropic",
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

/// Every provider and model the server can call, and the chains between them.
#[derive(Clone, Debug, PartialEq)]
pub struct Catalogue {
    providers: BTreeMap<String, ProviderEntry>,
    default_model: ModelRef,
    /// By `<provider>/<model>`, resolved.
    fallbacks: BTreeMap<ModelRef, Vec<ModelRef>>,
}

/// The scenario models of the demo provider (see `llm::demo::SCENARIOS`).
fn demo_entry() -> ProviderEntry {
    ProviderEntry {
        kind: Kind::Openai,
        base_url: None,
        api_key_env: None,
        headers: BTreeMap::new(),
        models: super::demo::SCENARIOS
            .iter()
            .map(|(id, _)| ModelSpec {
                id: id.to_string(),
                context_tokens: None,
                tools: true,
            })
            .collect(),
        open: false,
        demo: true,
    }
}

/// Whether `name` may name a provider: `[a-z0-9_-]{1,32}`.
pub fn valid_name(name: &str) -> bool {
    (1..=32).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
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
            let entry: ProviderEntry =
                serde_json::from_value(raw).map_err(|e| format!("provider {name:?}: {e}"))?;
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

    /// The model a session's `model` names: `<provider>/<model>`, or a bare model id: the
    /// open entry's when there is one (the single-provider settings), else the one entry's
    /// that lists it. The error says what to write instead.
    pub fn resolve(&self, name: &str) -> Result<ModelRef, String> {
        let name = name.trim();
        if let Some((provider, model)) = name.split_once('/') {
            if let Some(entry) = self.providers.get(provider) {
                if !model.is_empty() && (entry.open || entry.models.iter().any(|m| m.id == model)) {
                    return Ok(ModelRef {
                        provider: provider.to_string(),
                        model: model.to_string(),
                    });
                }
                return Err(format!(
                    "provider {provider:?} has no model {model:?}; GET /models lists them"
                ));
            }
        }
        // The single-provider settings sent every model to their provider: they still do.
        let open: Vec<&String> = self
            .providers
            .iter()
            .filter(|(_, e)| e.open)
            .map(|(p, _)| p)
            .collect();
        if let ([one], false) = (open.as_slice(), name.is_empty()) {
            return Ok(ModelRef {
                provider: one.to_string(),
                model: name.to_string(),
            });
        }
        let listed: Vec<&String> = self
            .providers
            .iter()
            .filter(|(_, e)| e.models.iter().any(|m| m.id == name))
            .map(|(p, _)| p)
            .collect();
        match listed.as_slice() {
            [one] => Ok(ModelRef {
                provider: one.to_string(),
                model: name.to_string(),
            }),
            [] => Err(format!(
                "no provider has a model {name:?}; name one as <provider>/<model> (GET /models lists them)"
            )),
            several => Err(format!(
                "model {name:?} is served by {}: name one as <provider>/<model>",
                several
                    .iter()
                    .map(|p| format!("{p}/{name}"))
                    .collect::<Vec<_>>()
                    .join(" and ")
            )),
        }
    }

    /// A chain of names, resolved; at most [`MAX_FALLBACKS`].
    pub fn resolve_chain(&self, names: &[String]) -> Result<Vec<ModelRef>, String> {
        if names.len() > MAX_FALLBACKS {
            return Err(format!(
                "a fallback chain has at most {MAX_FALLBACKS} models"
            ));
        }
        names.iter().map(|n| self.resolve(n)).collect()
    }

    /// The models a step of a session on `model` tries, in order: the model, then the
    /// session's own chain when it has one, else the catalogue's; each model once.
    pub fn chain(&self, model: &ModelRef, session: Option<&[ModelRef]>) -> Vec<ModelRef> {
        let rest = match session {
            Some(own) => own,
            None => self.fallbacks.get(model).map(Vec::as_slice).unwrap_or(&[]),
        };
        let mut chain = vec![model.clone()];
        for m in rest {
            if !chain.contains(m) {
                chain.push(m.clone());
            }
        }
        chain
    }

    /// The catalogue's chain after `model`.
    pub fn fallbacks_of(&self, model: &ModelRef) -> &[ModelRef] {
        self.fallbacks.get(model).map(Vec::as_slice).unwrap_or(&[])
    }

    /// What the catalogue says of `model` (`None`: an open entry's unlisted model).
    pub fn spec(&self, model: &ModelRef) -> Option<&ModelSpec> {
        self.providers
            .get(&model.provider)?
            .models
            .iter()
            .find(|m| m.id == model.model)
    }

    /// Whether `model`'s steps may carry tools (by the catalogue; a provider's refusal is
    /// remembered elsewhere).
    pub fn tools(&self, model: &ModelRef) -> bool {
        self.spec(model).is_none_or(|m| m.tools)
    }
}

#[cfg(test)]
mod tests;
