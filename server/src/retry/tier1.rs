//! Tier 1's adapter: opens a provider stream under the [`Policy`], retrying only the opening
//! (connect, status, headers and any stream events before the first content delta). Once a
//! delta is in hand it returns, and nothing is retried in-run after that. Dropping the
//! future (the run's cancel) aborts a sleep or an in-flight request at once.
use super::classify;
use super::policy::{Decision, Policy};
use crate::clock::now_ms;
use crate::llm::{ChatRequest, DeltaStream, Provider, ProviderError, StreamItem};
use crate::metrics::metrics;
use futures::future::BoxFuture;
use futures::StreamExt;
use std::time::{Duration, Instant};

/// What Tier 1 reports while it works; the run's task records and announces it.
pub trait Observer: Send {
    /// Attempt `n` (1-based) starts now.
    fn started(&mut self, n: u32) -> BoxFuture<'_, ()>;
    /// Attempt `n` failed; `retry_in` is set when Tier 1 tries again after that wait.
    fn failed<'a>(
        &'a mut self,
        n: u32,
        err: &'a ProviderError,
        retry_in: Option<Duration>,
    ) -> BoxFuture<'a, ()>;
    /// Whether a cooldown that holds the request is slept out (within the window) or ends
    /// the opening at once: a model with a fallback after it is passed over instead.
    fn waits_out_cooldowns(&self) -> bool {
        true
    }
}

/// An opened stream and the items read from it up to its first delta (or its end).
pub struct Opened {
    pub stream: DeltaStream,
    pub head: Vec<StreamItem>,
}

/// Opens the stream, retrying its opening under the policy. `idle` bounds the wait for
/// each item before the first delta.
pub async fn open(
    provider: &dyn Provider,
    req: &ChatRequest,
    policy: &Policy,
    idle: Duration,
    obs: &mut dyn Observer,
) -> Result<Opened, ProviderError> {
    let window = Instant::now();
    let mut n = 0;
    loop {
        n += 1;
        obs.started(n).await;
        let attempt = match provider.open(req.clone()).await {
            Ok(stream) => read_head(stream, idle).await,
            Err(e) => Err(e),
        };
        count_attempt(&attempt);
        let err = match attempt {
            Ok(opened) => return Ok(opened),
            Err(e) => e,
        };
        if matches!(err, ProviderError::CoolingDown { .. }) && !obs.waits_out_cooldowns() {
            obs.failed(n, &err, None).await;
            return Err(err);
        }
        let decision = {
            let mut rng = rand::rng();
            policy.after_failure(n, &err, window.elapsed(), now_ms(), &mut rng)
        };
        match decision {
            Decision::RetryIn(wait) => {
                obs.failed(n, &err, Some(wait)).await;
                tokio::time::sleep(wait).await;
            }
            Decision::GiveUp => {
                obs.failed(n, &err, None).await;
                return Err(err);
            }
        }
    }
}

/// Counts an attempt by outcome; one a cooldown kept from being sent is no request (the gate
/// counts it as avoided).
fn count_attempt(attempt: &Result<Opened, ProviderError>) {
    match attempt {
        Ok(_) => metrics().tier1_attempt(None),
        Err(ProviderError::CoolingDown { .. }) => {}
        Err(e) => metrics().tier1_attempt(Some(&classify::classify(e, false, 0).retry_class)),
    }
}

/// Reads items until the first delta or the end; an error before then fails the attempt.
/// `idle` bounds the wait for any bytes, not for an item.
async fn read_head(mut stream: DeltaStream, idle: Duration) -> Result<Opened, ProviderError> {
    let mut head = Vec::new();
    loop {
        let item = match tokio::time::timeout(idle, stream.next()).await {
            Err(_) => return Err(ProviderError::Stalled { idle }),
            Ok(None) => {
                return Err(ProviderError::StreamCut {
                    message: "ended before any reply".into(),
                })
            }
            // Bytes that complete no item: alive, nothing to keep.
            Ok(Some(Ok(StreamItem::Heard))) => continue,
            Ok(Some(item)) => item?,
        };
        let last = matches!(item, StreamItem::Delta(_) | StreamItem::Done);
        head.push(item);
        if last {
            return Ok(Opened { stream, head });
        }
    }
}
