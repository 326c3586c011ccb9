//! Keeps one MCP server connected: starts it, lists its tools, re-lists them when told,
//! restarts it with backoff when it dies, and ends it on shutdown.
mod child;
mod connect;
mod serve;

use crate::mcp_client::config::TransportSpec;
use crate::mcp_client::Slot;
use crate::redact::Redactor;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

const BACKOFF_START: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(60);
/// A server up this long counts as healthy: its next restart waits [`BACKOFF_START`] again.
const HEALTHY_AFTER: Duration = Duration::from_secs(60);
const MAX_ERROR_CHARS: usize = 600;

/// Runs until `shutdown` fires.
pub(super) async fn run(
    slot: Arc<Slot>,
    spec: TransportSpec,
    redactor: Redactor,
    shutdown: CancellationToken,
) {
    let secrets = Secrets::of(&spec, &redactor);
    let mut backoff = BACKOFF_START;
    loop {
        let began = Instant::now();
        let reason = connect::connect_and_serve(&slot, &spec, &secrets, &shutdown).await;
        if shutdown.is_cancelled() {
            return;
        }
        if began.elapsed() >= HEALTHY_AFTER {
            backoff = BACKOFF_START;
        }
        let reason = secrets.scrub(&reason);
        tracing::warn!(server = %slot.name, error = %reason, "MCP server unavailable; restarting in {} s", backoff.as_secs());
        slot.set_failed(format!("{reason}; retrying in {} s", backoff.as_secs()));
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = shutdown.cancelled() => return,
        }
        backoff = backoff.saturating_mul(2).min(BACKOFF_MAX);
    }
}

/// What to scrub from a server's failure and error output: its own secrets (also short
/// ones: it is its own text) and every configured secret.
#[derive(Clone)]
struct Secrets(Redactor);

/// A server's own secret values this short or shorter are no real secret.
const MIN_OWN_SECRET_CHARS: usize = 4;

impl Secrets {
    fn of(spec: &TransportSpec, all: &Redactor) -> Secrets {
        Secrets(Redactor::with_min_chars(spec.secrets(), MIN_OWN_SECRET_CHARS).and(all))
    }

    fn scrub(&self, text: &str) -> String {
        self.0.redact(text).chars().take(MAX_ERROR_CHARS).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_scrubbed_from_text() {
        let spec = TransportSpec::Http {
            url: "https://h/mcp?key=abcdef".into(),
            headers: vec![("Authorization".into(), "Bearer tok-123".into())],
        };
        let s = Secrets::of(&spec, &Redactor::new(["the-api-key-1"]));
        let out = s.scrub("sent Bearer tok-123 to https://h/mcp?key=abcdef with the-api-key-1");
        assert!(
            !out.contains("tok-123") && !out.contains("abcdef") && !out.contains("the-api-key-1"),
            "{out}"
        );
    }
}
