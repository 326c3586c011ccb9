//! The failure classifier: maps every run failure to the contract's
//! `{retryable, retry_class, retry_after_until?}`. Pure: no clock, no I/O.
use crate::llm::{ProviderError, RetryAfter};
use app::wire::{RetryClass, RetryClassification};

/// A classification of `class`, with its retryability from the contract.
pub fn of(class: RetryClass, retry_after_until: Option<i64>) -> RetryClassification {
    RetryClassification {
        retryable: class.is_retryable(),
        retry_class: class,
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
    let name = match err {
        // A run a cooldown stopped fails as the answer that started the cooldown did.
        ProviderError::CoolingDown { class, .. } => class.clone(),
        ProviderError::NoCredentials => RetryClass::CredentialsUnresolved,
        ProviderError::Agent { class, .. } => class.clone(),
        ProviderError::Transport { .. } if after_first_delta => RetryClass::StreamInterrupted,
        ProviderError::Transport { .. } => RetryClass::Network,
        ProviderError::StreamCut { .. } | ProviderError::Stalled { .. } => {
            RetryClass::StreamInterrupted
        }
        ProviderError::Timeout { .. } => RetryClass::Timeout,
        // A provider that breaks the protocol is failing on its side; another try may not.
        ProviderError::Protocol { .. } => RetryClass::ServerError,
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
        } if name.is_retryable() => Some(until(*a, now_ms)),
        ProviderError::Agent {
            retry_after: Some(a),
            ..
        } if name.is_retryable() => Some(until(*a, now_ms)),
        // With its deadline, also for `quota_exhausted` (which stays not retryable).
        ProviderError::CoolingDown { until, .. } => Some(*until),
        _ => None,
    };
    of(name, wait)
}

fn status_class(status: u16, kind: &str, code: &str, message: &str) -> RetryClass {
    let lower = message.to_ascii_lowercase();
    let any = |needles: &[&str]| needles.iter().any(|n| kind.contains(n) || code.contains(n));
    if any(&["context_length_exceeded", "context_window_exceeded"])
        || lower.contains("prompt is too long")
        || lower.contains("maximum context length")
    {
        return RetryClass::ContextOverflow;
    }
    if any(&["insufficient_quota", "billing", "quota_exceeded"]) || lower.contains("credit balance")
    {
        return RetryClass::QuotaExhausted;
    }
    if any(&["overloaded"]) {
        return RetryClass::Overloaded;
    }
    if any(&[
        "authentication_error",
        "permission_error",
        "invalid_api_key",
    ]) {
        return RetryClass::AuthFailed;
    }
    match status {
        401 | 403 => RetryClass::AuthFailed,
        429 => RetryClass::RateLimited,
        503 | 529 => RetryClass::Overloaded,
        500..=599 => RetryClass::ServerError,
        400..=499 => RetryClass::InvalidRequest,
        // An error event on an open stream, without a status.
        _ if any(&["rate_limit"]) => RetryClass::RateLimited,
        _ if any(&["invalid_request"]) => RetryClass::InvalidRequest,
        _ => RetryClass::ServerError,
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
        let cases: Vec<(ProviderError, bool, RetryClass, bool)> = vec![
            (
                status(429, "rate_limit_error", "slow down"),
                false,
                RetryClass::RateLimited,
                true,
            ),
            (
                status(429, "insufficient_quota", "You exceeded your current quota"),
                false,
                RetryClass::QuotaExhausted,
                false,
            ),
            (
                status(503, "", "unavailable"),
                false,
                RetryClass::Overloaded,
                true,
            ),
            (
                status(529, "overloaded_error", "Overloaded"),
                false,
                RetryClass::Overloaded,
                true,
            ),
            (
                status(0, "overloaded_error", "Overloaded"),
                false,
                RetryClass::Overloaded,
                true,
            ),
            (
                status(500, "", "boom"),
                false,
                RetryClass::ServerError,
                true,
            ),
            (
                status(502, "", "bad gateway"),
                false,
                RetryClass::ServerError,
                true,
            ),
            (
                status(401, "", "bad key"),
                false,
                RetryClass::AuthFailed,
                false,
            ),
            (
                status(403, "", "forbidden"),
                false,
                RetryClass::AuthFailed,
                false,
            ),
            (
                status(
                    400,
                    "invalid_request_error",
                    "prompt is too long: 210000 tokens",
                ),
                false,
                RetryClass::ContextOverflow,
                false,
            ),
            (
                status(400, "invalid_request_error", "unknown field"),
                false,
                RetryClass::InvalidRequest,
                false,
            ),
            (
                ProviderError::Transport {
                    message: "connection refused".into(),
                },
                false,
                RetryClass::Network,
                true,
            ),
            (
                ProviderError::Transport {
                    message: "reset".into(),
                },
                true,
                RetryClass::StreamInterrupted,
                true,
            ),
            (
                ProviderError::StreamCut {
                    message: "eof".into(),
                },
                true,
                RetryClass::StreamInterrupted,
                true,
            ),
            (
                ProviderError::Stalled {
                    idle: Duration::from_secs(60),
                },
                true,
                RetryClass::StreamInterrupted,
                true,
            ),
            (
                ProviderError::NoCredentials,
                false,
                RetryClass::CredentialsUnresolved,
                false,
            ),
            (
                ProviderError::Timeout {
                    message: "no answer".into(),
                },
                false,
                RetryClass::Timeout,
                true,
            ),
            (
                ProviderError::Protocol {
                    message: "a 16 MB line".into(),
                },
                false,
                RetryClass::ServerError,
                true,
            ),
        ];
        for (err, started, want, retryable) in cases {
            let c = classify(&err, started, 0);
            assert_eq!((c.retry_class, c.retryable), (want, retryable), "{err:?}");
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
        assert_eq!(
            classify(&err, false, 0).retry_class,
            RetryClass::ContextOverflow
        );
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
        let cooled = |class: RetryClass| ProviderError::CoolingDown {
            class,
            until: 9_000,
        };
        let c = classify(&cooled(RetryClass::RateLimited), false, 1_000);
        assert_eq!(
            (c.retry_class, c.retryable, c.retry_after_until),
            (RetryClass::RateLimited, true, Some(9_000))
        );
        let q = classify(&cooled(RetryClass::QuotaExhausted), false, 1_000);
        assert_eq!(
            (q.retry_class, q.retryable, q.retry_after_until),
            (RetryClass::QuotaExhausted, false, Some(9_000))
        );
    }
}
