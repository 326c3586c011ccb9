//! A provider whose errors hold no secret: the text a provider sends about a failure (some
//! proxies quote the API key) passes the [`Redactor`] before the engine records, logs or
//! quotes it.
use super::{ChatRequest, DeltaStream, Provider, ProviderError};
use crate::redact::Redactor;
use futures::future::BoxFuture;
use futures::StreamExt;
use std::sync::Arc;

pub struct Redacted {
    inner: Arc<dyn Provider>,
    redactor: Redactor,
}

impl Redacted {
    pub fn new(inner: Arc<dyn Provider>, redactor: Redactor) -> Redacted {
        Redacted { inner, redactor }
    }
}

impl Provider for Redacted {
    fn open(&self, req: ChatRequest) -> BoxFuture<'_, Result<DeltaStream, ProviderError>> {
        Box::pin(async move {
            match self.inner.open(req).await {
                Ok(stream) => {
                    let redactor = self.redactor.clone();
                    Ok(stream
                        .map(move |item| item.map_err(|e| e.redacted(&redactor)))
                        .boxed())
                }
                Err(e) => Err(e.redacted(&self.redactor)),
            }
        })
    }
}
