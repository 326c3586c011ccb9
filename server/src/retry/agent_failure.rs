//! What an ACP agent's failure means (CONTRACT §9): a JSON-RPC error answering
//! `session/prompt`, or the process exiting, as a retry class. Pure: the error's code, text
//! and `data` in, a class and an advised wait out.
use crate::llm::RetryAfter;
use app::wire::RetryClass;
use serde_json::Value;
use std::time::Duration;

/// The JSON-RPC code an agent uses when its prompt failed inside (Claude Code's provider
/// errors among them).
pub const INTERNAL_ERROR: i32 = -32603;
/// `-32000`: the agent needs authentication first.
pub const AUTH_REQUIRED: i32 = -32000;

/// The class of a JSON-RPC error an agent answered a prompt with, and the wait its text
/// advises. Claude Code (through `claude-agent-acp`) answers a prompt whose provider kept
/// failing with `-32603` and `API Error: 529 {"type":"error","error":{"type":
/// "overloaded_error",…}}`, after its own retries, with no `data`; other agents put a
/// status or an error type in `data`. Both are read.
pub fn classify(
    code: i32,
    message: &str,
    data: Option<&Value>,
) -> (RetryClass, Option<RetryAfter>) {
    let data_text = data.map(|d| d.to_string()).unwrap_or_default();
    let lower = format!("{message} {data_text}").to_ascii_lowercase();
    let status = api_status(message).or_else(|| data.and_then(data_status));
    let has = |needles: &[&str]| needles.iter().any(|n| lower.contains(n));
    let class = if has(&[
        "prompt is too long",
        "context length",
        "context window",
        "context_length_exceeded",
        "maximum context",
        "too many tokens",
    ]) {
        RetryClass::ContextOverflow
    } else if code == AUTH_REQUIRED
        || matches!(status, Some(401 | 403))
        || has(&[
            "authentication_error",
            "authentication required",
            "invalid api key",
            "invalid x-api-key",
            "invalid_api_key",
            "please run /login",
            "not logged in",
            "permission_error",
        ])
    {
        RetryClass::AuthFailed
    } else if matches!(status, Some(529 | 503)) || has(&["overloaded"]) {
        RetryClass::Overloaded
    } else if status == Some(429)
        || has(&[
            "rate_limit",
            "rate limit",
            "usage limit",
            "too many requests",
        ])
    {
        RetryClass::RateLimited
    } else if matches!(status, Some(500..=599)) {
        RetryClass::ServerError
    } else {
        RetryClass::AgentError
    };
    let wait = match class {
        RetryClass::RateLimited | RetryClass::Overloaded => advised_wait(message, data),
        _ => None,
    };
    (class, wait)
}

/// The status of Claude Code's `API Error: <status> …` text.
fn api_status(message: &str) -> Option<u16> {
    let at = message.find("API Error: ")?;
    let rest = &message[at + "API Error: ".len()..];
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().ok().filter(|s| (100..=599).contains(s))
}

/// A status an agent put in its error's `data` (`{"status": 429}`, `{"statusCode": 529}`,
/// `{"http_status": 503}`).
fn data_status(data: &Value) -> Option<u16> {
    ["status", "statusCode", "status_code", "http_status"]
        .iter()
        .find_map(|k| data.get(*k).and_then(Value::as_u64))
        .and_then(|s| u16::try_from(s).ok())
        .filter(|s| (100..=599).contains(s))
}

/// An advised wait in the error: `data.retry_after` (seconds), `data.retry_after_ms`, or a
/// reset time `…|<epoch seconds>` (Claude Code's usage limit: `Claude AI usage limit
/// reached|1767225600`). Bounded: nothing past a day is believed.
fn advised_wait(message: &str, data: Option<&Value>) -> Option<RetryAfter> {
    const DAY_S: u64 = 86_400;
    if let Some(d) = data {
        if let Some(ms) = d.get("retry_after_ms").and_then(Value::as_u64) {
            return Some(RetryAfter::Delay(Duration::from_millis(
                ms.min(DAY_S * 1000),
            )));
        }
        if let Some(s) = d.get("retry_after").and_then(Value::as_u64) {
            return Some(RetryAfter::Delay(Duration::from_secs(s.min(DAY_S))));
        }
    }
    let (_, tail) = message.rsplit_once('|')?;
    let secs: i64 = tail.trim().parse().ok()?;
    // Epoch seconds between 2020 and 2100 only; anything else is not a reset time.
    (1_577_836_800..4_102_444_800)
        .contains(&secs)
        .then(|| RetryAfter::At(secs.saturating_mul(1000)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const OVERLOADED: &str = r#"API Error: 529 {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":null}"#;
    const RATE_LIMITED: &str = r#"API Error: 429 {"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}"#;

    #[test]
    fn claude_codes_provider_errors() {
        assert_eq!(
            classify(INTERNAL_ERROR, OVERLOADED, None),
            (RetryClass::Overloaded, None)
        );
        assert_eq!(
            classify(INTERNAL_ERROR, RATE_LIMITED, None).0,
            RetryClass::RateLimited
        );
        let auth = r#"API Error: 401 {"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#;
        assert_eq!(
            classify(INTERNAL_ERROR, auth, None).0,
            RetryClass::AuthFailed
        );
        let long = r#"API Error: 400 {"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#;
        assert_eq!(
            classify(INTERNAL_ERROR, long, None).0,
            RetryClass::ContextOverflow
        );
        let server = r#"API Error: 500 {"type":"error","error":{"type":"api_error","message":"Internal server error"}}"#;
        assert_eq!(
            classify(INTERNAL_ERROR, server, None).0,
            RetryClass::ServerError
        );
    }

    #[test]
    fn codes_and_data_of_other_agents() {
        assert_eq!(
            classify(AUTH_REQUIRED, "Authentication required", None).0,
            RetryClass::AuthFailed
        );
        assert_eq!(
            classify(
                INTERNAL_ERROR,
                "stream error",
                Some(&json!({"status": 503}))
            )
            .0,
            RetryClass::Overloaded
        );
        assert_eq!(
            classify(
                INTERNAL_ERROR,
                "upstream failed",
                Some(&json!({"statusCode": 429, "retry_after": 30}))
            ),
            (
                RetryClass::RateLimited,
                Some(RetryAfter::Delay(Duration::from_secs(30)))
            )
        );
        // What says nothing of a provider is the agent's own failure: not retried.
        let (class, wait) = classify(-32602, "Invalid params: unknown session", None);
        assert_eq!((class.clone(), wait), (RetryClass::AgentError, None));
        assert!(!class.is_retryable());
    }

    #[test]
    fn a_usage_limits_reset_time_is_the_advised_wait() {
        assert_eq!(
            classify(
                INTERNAL_ERROR,
                "Claude AI usage limit reached|1767225600",
                None
            ),
            (
                RetryClass::RateLimited,
                Some(RetryAfter::At(1_767_225_600_000))
            )
        );
        // A number after a bar that is no time of this century is ignored; a wait past a
        // day is held to one.
        assert_eq!(classify(INTERNAL_ERROR, "rate limit|42", None).1, None);
        assert_eq!(
            classify(
                INTERNAL_ERROR,
                "rate limit",
                Some(&json!({"retry_after": u64::MAX}))
            )
            .1,
            Some(RetryAfter::Delay(Duration::from_secs(86_400)))
        );
    }

    #[test]
    fn hostile_text_is_only_read() {
        let huge = "API Error: 99999999999999999999999 overloaded".to_string();
        assert_eq!(
            classify(INTERNAL_ERROR, &huge, None).0,
            RetryClass::Overloaded
        );
        assert_eq!(
            classify(i32::MIN, "", Some(&json!(null))).0,
            RetryClass::AgentError
        );
    }
}
