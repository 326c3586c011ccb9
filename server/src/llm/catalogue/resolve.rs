//! Names to models: a session's `model` resolved to `<provider>/<model>`, chains of them,
//! and what the catalogue says of a model.
use super::{Catalogue, ModelRef, ModelSpec, MAX_FALLBACKS};

impl Catalogue {
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
