//! The cooldown gate: a [`Provider`] in front of the configured one that sends no request
//! while a provider-wide cooldown holds its key, and starts a cooldown from every answer that
//! advised a wait. Every provider request (each Tier 1 attempt) passes through it.
use super::cooldown::{self, Key, Table};
use crate::clock::now_ms;
use crate::llm::{ChatRequest, DeltaStream, Provider, ProviderError};
use crate::metrics::metrics;
use futures::future::BoxFuture;
use std::sync::Arc;

pub struct Gate {
    inner: Arc<dyn Provider>,
    cooldowns: Arc<dyn Table>,
    /// Provider kind, endpoint and hashed API key: the cooldown key of each request but
    /// for its model.
    endpoint: Key,
    /// No cooldown lasts longer than this from now (advice is clamped when parsed; this
    /// also bounds cooldowns kept from before).
    max_wait: std::time::Duration,
}

impl Gate {
    /// `endpoint`: the provider's cooldown key but for its model.
    pub fn new(
        inner: Arc<dyn Provider>,
        cooldowns: Arc<dyn Table>,
        endpoint: Key,
        max_wait: std::time::Duration,
    ) -> Gate {
        Gate {
            inner,
            cooldowns,
            endpoint,
            max_wait,
        }
    }
}

impl Provider for Gate {
    fn open(&self, req: ChatRequest) -> BoxFuture<'_, Result<DeltaStream, ProviderError>> {
        Box::pin(async move {
            let key = self.endpoint.for_model(&req.model);
            let now = now_ms();
            let latest = now.saturating_add(crate::llm::limits::millis(self.max_wait));
            if let Some(mut wait) = self.cooldowns.check(&key, now).await {
                metrics().request_avoided();
                wait.until = wait.until.min(latest);
                return Err(wait.refusal());
            }
            let mut opened = self.inner.open(req).await;
            if let Err(err) = &mut opened {
                let now = now_ms();
                if let Some((until, reason)) = cooldown::advised(err, now) {
                    let until = until.min(latest);
                    tracing::info!(key = %key.shown(), until, reason = reason.as_str(), "provider cooldown starts");
                    self.cooldowns.note(key, until, reason, now).await;
                    // The failing run and the runs the cooldown holds share one deadline.
                    if let ProviderError::Status {
                        retry_after: Some(advice),
                        ..
                    } = err
                    {
                        *advice = advice.pinned(until);
                    }
                }
            }
            opened
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::RetryAfter;
    use app::wire::RetryClass;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Duration;

    /// Answers every call with a 429 advising `wait`, and counts the calls.
    struct Throttled {
        calls: AtomicU32,
        wait: Duration,
    }

    impl Provider for Throttled {
        fn open(&self, _req: ChatRequest) -> BoxFuture<'_, Result<DeltaStream, ProviderError>> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            let wait = self.wait;
            Box::pin(async move {
                Err(ProviderError::Status {
                    status: 429,
                    error_type: None,
                    error_code: None,
                    message: "slow down".into(),
                    retry_after: Some(RetryAfter::Delay(wait)),
                    should_retry: None,
                })
            })
        }
    }

    fn request(model: &str) -> ChatRequest {
        ChatRequest {
            tools: Default::default(),
            model: model.into(),
            messages: Vec::new().into(),
        }
    }

    #[tokio::test]
    async fn an_advised_wait_holds_the_next_request_of_that_model_only() {
        let inner = Arc::new(Throttled {
            calls: AtomicU32::new(0),
            wait: Duration::from_secs(3000),
        });
        let cooldowns = Arc::new(super::cooldown::Cooldowns::default());
        let gate = Gate::new(
            inner.clone(),
            cooldowns.clone(),
            Key::new("openai", "https://api.example/v1", Some("sk-secret"), ""),
            Duration::from_secs(86_400),
        );
        let Err(first) = gate.open(request("m")).await else {
            panic!("a 429")
        };
        let Err(ProviderError::CoolingDown { class, until }) = gate.open(request("m")).await else {
            panic!("held by the cooldown")
        };
        assert_eq!(class, RetryClass::RateLimited);
        assert_eq!(inner.calls.load(Ordering::SeqCst), 1, "no second request");
        assert_eq!(
            first,
            ProviderError::Status {
                status: 429,
                error_type: None,
                error_code: None,
                message: "slow down".into(),
                retry_after: Some(RetryAfter::Pinned {
                    wait: Duration::from_secs(3000),
                    until
                }),
                should_retry: None,
            },
            "the first failure carries the cooldown's deadline"
        );
        let listed = cooldowns.list_now(now_ms());
        assert_eq!(listed.len(), 1);
        assert!(!listed[0].key.contains("sk-secret"));
        // Another model is not held.
        assert!(gate.open(request("other")).await.is_err());
        assert_eq!(inner.calls.load(Ordering::SeqCst), 2);
    }
}
