//! The provider of a catalogue: sends each request to the provider its `<provider>/<model>`
//! names (each behind its own cooldown gate), with no tools for a model that takes none.
use super::models::Models;
use crate::llm::{ChatRequest, DeltaStream, Provider, ProviderError};
use futures::future::BoxFuture;
use std::collections::BTreeMap;
use std::sync::Arc;

/// What runs call models through: the request path and the models' directory.
#[derive(Clone)]
pub struct Providers {
    pub send: Arc<dyn Provider>,
    pub models: Arc<Models>,
    /// The catalogue's ACP agents (CONTRACT §9), which run their turns themselves.
    pub agents: crate::acp_client::Agents,
}

pub struct Router {
    models: Arc<Models>,
    providers: BTreeMap<String, Arc<dyn Provider>>,
}

impl Router {
    pub fn new(models: Arc<Models>, providers: BTreeMap<String, Arc<dyn Provider>>) -> Router {
        Router { models, providers }
    }
}

/// Whether a provider refused a request because of its tools (Ollama: "… does not support
/// tools"; vLLM: "… tool choice requires --enable-auto-tool-choice").
pub fn refused_tools(err: &ProviderError) -> bool {
    match err {
        ProviderError::Status {
            status: 400,
            message,
            ..
        } => message.to_ascii_lowercase().contains("tool"),
        _ => false,
    }
}

impl Provider for Router {
    fn open(&self, mut req: ChatRequest) -> BoxFuture<'_, Result<DeltaStream, ProviderError>> {
        Box::pin(async move {
            let model = self
                .models
                .catalogue()
                .resolve(&req.model)
                .map_err(|message| ProviderError::Status {
                    status: 400,
                    error_type: Some("invalid_request_error".into()),
                    error_code: Some("model_not_found".into()),
                    message,
                    retry_after: None,
                    should_retry: Some(false),
                })?;
            let Some(provider) = self.providers.get(&model.provider) else {
                return Err(ProviderError::NoCredentials);
            };
            req.model = model.model.clone();
            if !self.models.tools(&model) {
                req.tools = Arc::from([]);
            }
            if req.tools.is_empty() {
                return provider.open(req).await;
            }
            let without = ChatRequest {
                tools: Arc::from([]),
                ..req.clone()
            };
            match provider.open(req).await {
                Err(e) if refused_tools(&e) => {
                    self.models.refuse_tools(&model);
                    provider.open(without).await
                }
                opened => opened,
            }
        })
    }
}
