//! Reading provider responses: SSE parsing (eventsource-stream) and the error answer's fields.
use super::{DeltaStream, ProviderError, RetryAfter, StreamItem};
use eventsource_stream::Eventsource;
use futures::StreamExt;
use reqwest::header::HeaderMap;
use std::collections::VecDeque;
use std::time::Duration;

/// The advised wait from `retry-after-ms`, `Retry-After` (seconds or HTTP date).
pub fn retry_after(headers: &HeaderMap, now_ms: i64) -> Option<RetryAfter> {
    let get = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(ms) = get("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        if ms.is_finite() && ms >= 0.0 {
            return Some(RetryAfter::Delay(Duration::from_millis(ms as u64)));
        }
    }
    let value = get("retry-after")?;
    parse_retry_after(value, now_ms)
}

/// Parses a `Retry-After` value: delta-seconds or an HTTP date.
pub fn parse_retry_after(value: &str, _now_ms: i64) -> Option<RetryAfter> {
    if let Ok(secs) = value.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0)
            .then(|| RetryAfter::Delay(Duration::from_millis((secs * 1000.0) as u64)));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    let ms = at.duration_since(std::time::UNIX_EPOCH).ok()?.as_millis() as i64;
    Some(RetryAfter::At(ms))
}

/// Builds the error for a non-2xx answer from its status, headers and (JSON) body.
pub fn status_error(status: u16, headers: &HeaderMap, body: &str, now_ms: i64) -> ProviderError {
    let should_retry = headers
        .get("x-should-retry")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| match v.trim() {
            "true" => Some(true),
            "false" => Some(false),
            _ => None,
        });
    let (error_type, error_code, message) = error_fields(body);
    ProviderError::Status {
        status,
        error_type,
        error_code,
        message: message.unwrap_or_else(|| short(body)),
        retry_after: retry_after(headers, now_ms),
        should_retry,
    }
}

/// `(type, code, message)` from an OpenAI `{"error": {...}}` or Anthropic
/// `{"type": "error", "error": {...}}` body.
pub fn error_fields(body: &str) -> (Option<String>, Option<String>, Option<String>) {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(body) else {
        return (None, None, None);
    };
    let err = v.get("error").unwrap_or(&v);
    let s = |k: &str| err.get(k).and_then(|x| x.as_str()).map(str::to_string);
    let code = s("code").or_else(|| err.get("code").map(|c| c.to_string()));
    (s("type"), code, s("message"))
}

/// The error an open stream reports in one of its events (Anthropic's `event: error`, an
/// OpenAI-compatible chunk with `error`): no status, the body's type, code and message.
pub fn stream_error(data: &str) -> ProviderError {
    let (error_type, error_code, message) = error_fields(data);
    ProviderError::Status {
        status: 0,
        error_type,
        error_code,
        message: message.unwrap_or_else(|| "error event in the stream".into()),
        retry_after: None,
        should_retry: None,
    }
}

fn short(body: &str) -> String {
    let t = body.trim();
    if t.is_empty() {
        return "no details".into();
    }
    t.chars().take(300).collect()
}

impl From<reqwest::Error> for ProviderError {
    fn from(e: reqwest::Error) -> Self {
        // reqwest's Display never includes headers; URLs carry no key in any provider we speak.
        let mut message = e.to_string();
        let mut src = std::error::Error::source(&e);
        while let Some(s) = src {
            message = format!("{message}: {s}");
            src = s.source();
        }
        ProviderError::Transport { message }
    }
}

/// Turns a 2xx SSE body into stream items with a provider's per-event parser
/// (`parse(event_name, data)`). The stream ends after the parser yields `Done`; a body that
/// ends or breaks before that is a `StreamCut` ("ended before `what_ends`").
pub fn item_stream<F>(resp: reqwest::Response, what_ends: &'static str, parse: F) -> DeltaStream
where
    F: FnMut(&str, &str) -> Result<Vec<StreamItem>, ProviderError> + Send + 'static,
{
    let state = (
        resp.bytes_stream().eventsource(),
        VecDeque::new(),
        false,
        parse,
    );
    futures::stream::unfold(
        state,
        move |(mut events, mut pending, mut done, mut parse)| async move {
            loop {
                if let Some(item) = pending.pop_front() {
                    return Some((Ok(item), (events, pending, done, parse)));
                }
                if done {
                    return None;
                }
                let failure = match events.next().await {
                    None => ProviderError::StreamCut {
                        message: format!("ended before {what_ends}"),
                    },
                    Some(Err(e)) => ProviderError::StreamCut {
                        message: e.to_string(),
                    },
                    Some(Ok(ev)) => match parse(&ev.event, &ev.data) {
                        Ok(items) => {
                            done = items.contains(&StreamItem::Done);
                            pending.extend(items);
                            continue;
                        }
                        Err(e) => e,
                    },
                };
                return Some((Err(failure), (events, pending, true, parse)));
            }
        },
    )
    .boxed()
}
