//! The models a server can call, as runs and `GET /models` see them: the catalogue, each
//! model's cooldown (by its provider's cooldown key) and whether its steps carry tools.
use crate::llm::catalogue::{Catalogue, ModelRef};
use crate::retry::cooldown::{Key, Table};
use app::wire::{ModelInfo, ModelList, ModelStatus};
use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};

pub struct Models {
    catalogue: Catalogue,
    /// Each provider's cooldown key but for its model (kind, endpoint, hashed API key).
    keys: BTreeMap<String, Key>,
    cooldowns: Arc<dyn Table>,
    /// Models whose provider refused a request because of its tools: sent none until restart.
    tools_refused: Mutex<HashSet<ModelRef>>,
}

impl Models {
    pub fn new(
        catalogue: Catalogue,
        keys: BTreeMap<String, Key>,
        cooldowns: Arc<dyn Table>,
    ) -> Models {
        Models {
            catalogue,
            keys,
            cooldowns,
            tools_refused: Mutex::new(HashSet::new()),
        }
    }

    pub fn catalogue(&self) -> &Catalogue {
        &self.catalogue
    }

    /// The cooldown key of `model` (`None`: a provider the catalogue does not have).
    pub fn key(&self, model: &ModelRef) -> Option<Key> {
        self.keys
            .get(&model.provider)
            .map(|k| k.for_model(&model.model))
    }

    /// Whether `model`'s steps are sent the session's tools.
    pub fn tools(&self, model: &ModelRef) -> bool {
        self.catalogue.tools(model) && !self.tools_refused().contains(model)
    }

    /// Remembers that `model`'s provider refused a request because of its tools.
    pub fn refuse_tools(&self, model: &ModelRef) {
        if self.tools_refused().insert(model.clone()) {
            tracing::warn!(%model, "the provider refused this model's tools: its steps are sent none until restart");
        }
    }

    fn tools_refused(&self) -> std::sync::MutexGuard<'_, HashSet<ModelRef>> {
        self.tools_refused.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every listed model with its status, as `GET /models` answers.
    pub async fn list(&self, now: i64) -> ModelList {
        // One read of every cooldown in force, not one per model.
        let cooling: BTreeMap<String, i64> = self
            .cooldowns
            .list(now)
            .await
            .into_iter()
            .map(|c| (c.key, c.until))
            .collect();
        let mut models = Vec::new();
        for (model, entry, _) in self.catalogue.models() {
            let until = self
                .key(&model)
                .and_then(|k| cooling.get(&k.shown()).copied());
            models.push(ModelInfo {
                id: model.id(),
                provider: model.provider.clone(),
                kind: entry.kind.as_str().to_string(),
                tools: self.tools(&model),
                status: if until.is_some() {
                    ModelStatus::Cooling
                } else {
                    ModelStatus::Ok
                },
                cooling_until: until,
                fallbacks: self
                    .catalogue
                    .fallbacks_of(&model)
                    .iter()
                    .map(ModelRef::id)
                    .collect(),
            });
        }
        ModelList {
            models,
            default_model: self.catalogue.default_model().id(),
        }
    }
}
