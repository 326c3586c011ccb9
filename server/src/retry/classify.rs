//! The failure classifier: maps every run failure to the contract's
//! `{retryable, retry_class, retry_after_until?}`. Pure: no clock, no I/O.
use crate::llm::{ProviderError, RetryAfter};
use app::wire::RetryClassification;

/// The contract's retry classes.
pub mod class {
    pub const RATE_LIMITED: &str = "rate_limited";
    pub const OVERLOADED: &str = "overloaded";
    pub const SERVER_ERROR: &str = "server_error";
    pub const NETWORK: &str = "network";
    pub const STREAM_INTERRUPTED: &str = "stream_interrupted";
    pub const INTERRUPTED: &str = "interrupted";
    pub const TIMEOUT: &str = "timeout";
    pub const INTERNAL: &str = "internal";
    pub const CONTEXT_OVERFLOW: &str = "context_overflow";
    pub const AUTH_FAILED: &str = "auth_failed";
    pub const CREDENTIALS_UNRESOLVED: &str = "credentials_unresolved";
    pub const SPEND_LIMIT_EXCEEDED: &str = "spend_limit_exceeded";
    pub const QUOTA_EXHAUSTED: &str = "quota_exhausted";
    pub const INVALID_REQUEST: &str = "invalid_request";
    pub const MAX_STEPS: &str = "max_steps";
    pub const REPLY_TOO_LARGE: &str = "reply_too_large";

    /// Whether a class may be retried (Tier 2 arms only on these).
    pub fn retryable(class: &str) -> bool {
        matches!(
            class,
            RATE_LIMITED
                | OVERLOADED
                | SERVER_ERROR
                | NETWORK
                | STREAM_INTERRUPTED
                | INTERRUPTED
                | TIMEOUT
                | INTERNAL
        )
    }
}

/// A classification of `class`, with its retryability from the contract.
pub fn of(class: &str, retry_after_until: Option<i64>) -> RetryClassification {
    RetryClassification {
        retryable: class::retryable(class),
        retry_class: class.to_string(),
        retry_after_until,
    }
}

/// The absolute time an advised wait ends (saturating: no advice can overflow it).
pub fn until(advice: RetryAfter, now_ms: i64) -> i64 {
    match advice {
        RetryAfter::Delay(d) => now_ms.saturating_add(crate::llm::limits::millis(d)),
        RetryAfter::At(at) => at,
        RetryAfter::Pinned { until, .. } => until,
    }
}

/// Classifies a provider failure. `after_first_delta`: the reply had started streaming.
pub fn classify(err: &ProviderError, after_first_delta: bool, now_ms: i64) -> RetryClassification {
    let name: &str = match err {
        // A run a cooldown stopped fails as the answer that started the cooldown did.
        ProviderError::CoolingDown { class, .. } => class,
        ProviderError::NoCredentials => class::CREDENTIALS_UNRESOLVED,
        ProviderError::Transport { .. } if after_first_delta => class::STREAM_INTERRUPTED,
        ProviderError::Transport { .. } => class::NETWORK,
        ProviderError::StreamCut { .. } | ProviderError::Stalled { .. } => {
            class::STREAM_INTERRUPTED
        }
        ProviderError::Timeout { .. } => class::TIMEOUT,
        // A provider that breaks the protocol is failing on its side; another try may not.
        ProviderError::Protocol { .. } => class::SERVER_ERROR,
        ProviderError::Status {
            status,
            error_type,
            error_code,
            message,
            ..
        } => status_class(
            *status,
            error_type.as_deref().unwrap_or(""),
            error_code.as_deref().unwrap_or(""),
            message,
        ),
    };
    let wait = match err {
        ProviderError::Status {
            retry_after: Some(a),
            ..
        } if class::retryable(name) => Some(until(*a, now_ms)),
        // With its deadline, also for `quota_exhausted` (which stays not retryable).
        ProviderError::CoolingDown { until, .. } => Some(*until),
        _ => None,
    };
    of(name, wait)
}

fn status_class(status: u16, kind: &str, code: &str, message: &str) -> &'static str {
    let lower = message.to_ascii_lowercase();
    let any = |needles: &[&str]| needles.iter().any(|n| kind.contains(n) || code.contains(n));
    if any(&["context_length_exceeded", "context_window_exceeded"])
        || lower.contains("prompt is too long")
        || lower.contains("maximum context length")
    {
        return class::CONTEXT_OVERFLOW;
    }
    if any(&["insufficient_quota", "billing", "quota_exceeded"]) || lower.contains("credit balance")
    {
        return class::QUOTA_EXHAUSTED;
    }
    if any(&["overloaded"]) {
        return class::OVERLOADED;
    }
    if any(&[
        "authentication_error",
        "permission_error",
        "invalid_api_key",
    ]) {
        return class::AUTH_FAILED;
    }
    match status {
        401 | 403 => class::AUTH_FAILED,
        429 => class::RATE_LIMITED,
        503 | 529 => class::OVERLOADED,
        500..=599 => class::SERVER_ERROR,
        400..=499 => class::INVALID_REQUEST,
        // An error event on an open stream, without a status.
        _ if any(&["rate_limit"]) => class::RATE_LIMITED,
        _ if any(&["invalid_request"]) => class::INVALID_REQUEST,
        _ => class::SERVER_ERROR,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn status(code: u16, kind: &str, msg: &str) -> ProviderError {
        ProviderError::Status {
            status: code,
            error_type: (!kind.is_empty()).then(|| kind.to_string()),
            error_code: None,
            message: msg.into(),
            retry_after: None,
            should_retry: None,
        }
    }

    #[test]
    fn the_table() {
        let cases: Vec<(ProviderError, bool, &str, bool)> = vec![
            (
                status(429, "rate_limit_error", "slow down"),
                false,
                "rate_limited",
                true,
            ),
            (
                status(429, "insufficient_quota", "You exceeded your current quota"),
                false,
                "quota_exhausted",
                false,
            ),
            (status(503, "", "unavailable"), false, "overloaded", true),
            (
                status(529, "overloaded_error", "Overloaded"),
                false,
                "overloaded",
                true,
            ),
            (
                status(0, "overloaded_error", "Overloaded"),
                false,
                "overloaded",
                true,
            ),
            (status(500, "", "boom"), false, "server_error", true),
            (status(502, "", "bad gateway"), false, "server_error", true),
            (status(401, "", "bad key"), false, "auth_failed", false),
            (status(403, "", "forbidden"), false, "auth_failed", false),
            (
                status(
                    400,
                    "invalid_request_error",
                    "prompt is too long: 210000 tokens",
                ),
                false,
                "context_overflow",
                false,
            ),
            (
                status(400, "invalid_request_error", "unknown field"),
                false,
                "invalid_request",
                false,
            ),
            (
                ProviderError::Transport {
                    message: "connection refused".into(),
                },
                false,
                "network",
                true,
            ),
            (
                ProviderError::Transport {
                    message: "reset".into(),
                },
                true,
                "stream_interrupted",
                true,
            ),
            (
                ProviderError::StreamCut {
                    message: "eof".into(),
                },
                true,
                "stream_interrupted",
                true,
            ),
            (
                ProviderError::Stalled {
                    idle: Duration::from_secs(60),
                },
                true,
                "stream_interrupted",
                true,
            ),
            (
                ProviderError::NoCredentials,
                false,
                "credentials_unresolved",
                false,
            ),
            (
                ProviderError::Timeout {
                    message: "no answer".into(),
                },
                false,
                "timeout",
                true,
            ),
            (
                ProviderError::Protocol {
                    message: "a 16 MB line".into(),
                },
                false,
                "server_error",
                true,
            ),
        ];
        for (err, started, want, retryable) in cases {
            let c = classify(&err, started, 0);
            assert_eq!(
                (c.retry_class.as_str(), c.retryable),
                (want, retryable),
                "{err:?}"
            );
        }
    }

    #[test]
    fn an_openai_context_code_is_overflow() {
        let err = ProviderError::Status {
            status: 400,
            error_type: Some("invalid_request_error".into()),
            error_code: Some("context_length_exceeded".into()),
            message: "too long".into(),
            retry_after: None,
            should_retry: None,
        };
        assert_eq!(classify(&err, false, 0).retry_class, "context_overflow");
    }

    #[test]
    fn advised_waits_become_absolute() {
        let mut err = status(429, "", "wait");
        if let ProviderError::Status { retry_after, .. } = &mut err {
            *retry_after = Some(RetryAfter::Delay(Duration::from_secs(3000)));
        }
        assert_eq!(
            classify(&err, false, 1_000).retry_after_until,
            Some(3_001_000)
        );
        assert_eq!(until(RetryAfter::At(42), 1_000), 42);
        // Saturates instead of overflowing.
        assert_eq!(until(RetryAfter::Delay(Duration::MAX), 1_000), i64::MAX);
        let pinned = RetryAfter::Pinned {
            wait: Duration::from_secs(5),
            until: 77,
        };
        assert_eq!(until(pinned, 1_000), 77);
    }

    #[test]
    fn a_cooldown_fails_as_the_answer_that_started_it() {
        let cooled = |class: &str| ProviderError::CoolingDown {
            class: class.into(),
            until: 9_000,
        };
        let c = classify(&cooled("rate_limited"), false, 1_000);
        assert_eq!(
            (c.retry_class.as_str(), c.retryable, c.retry_after_until),
            ("rate_limited", true, Some(9_000))
        );
        let q = classify(&cooled("quota_exhausted"), false, 1_000);
        assert_eq!(
            (q.retry_class.as_str(), q.retryable, q.retry_after_until),
            ("quota_exhausted", false, Some(9_000))
        );
    }
}
