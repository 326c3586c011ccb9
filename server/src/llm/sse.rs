//! Reading provider responses: SSE parsing (eventsource-stream) behind a size guard, and the
//! error answer's fields, every one bounded by the provider's [`Limits`].
use super::limits::{self, Limits};
use super::{DeltaStream, ProviderError, RetryAfter, StreamItem};
use eventsource_stream::{EventStreamError, Eventsource};
use futures::{Stream, StreamExt};
use reqwest::header::HeaderMap;
use std::collections::VecDeque;
use std::time::Duration;

/// The advised wait from `retry-after-ms`, `Retry-After` (seconds or HTTP date), clamped to
/// the limits' maximum however large (or far off) the provider said.
pub fn retry_after(headers: &HeaderMap, now_ms: i64, limits: &Limits) -> Option<RetryAfter> {
    let get = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(ms) = get("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        if ms.is_finite() && ms >= 0.0 {
            // `as` saturates a float that is too large for the integer.
            let wait = Duration::from_millis(ms as u64);
            return Some(RetryAfter::Delay(limits.clamp_wait(wait)));
        }
    }
    let value = get("retry-after")?;
    parse_retry_after(value, now_ms, limits)
}

/// Parses a `Retry-After` value: delta-seconds or an HTTP date, clamped to the maximum.
pub fn parse_retry_after(value: &str, now_ms: i64, limits: &Limits) -> Option<RetryAfter> {
    if let Ok(secs) = value.parse::<f64>() {
        if !(secs.is_finite() && secs >= 0.0) {
            return None;
        }
        // Clamped as seconds first, so the multiplication cannot leave the float's range.
        let max_secs = limits.max_advised_wait.as_secs_f64();
        let wait = Duration::from_secs_f64(secs.min(max_secs));
        return Some(RetryAfter::Delay(limits.clamp_wait(wait)));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    let ms = at.duration_since(std::time::UNIX_EPOCH).ok()?.as_millis();
    let ms = i64::try_from(ms).unwrap_or(i64::MAX);
    Some(RetryAfter::At(limits.clamp_until(ms, now_ms)))
}

/// Sends a call: its status line and headers must arrive within the header timeout, else the
/// attempt fails as `timeout` (retryable). Dropping the future aborts the request.
pub async fn send(
    call: reqwest::RequestBuilder,
    limits: &Limits,
) -> Result<reqwest::Response, ProviderError> {
    match tokio::time::timeout(limits.header_timeout, call.send()).await {
        Ok(resp) => Ok(resp?),
        Err(_) => Err(ProviderError::Timeout {
            message: format!(
                "the provider did not answer within {} s",
                limits.header_timeout.as_secs_f64()
            ),
        }),
    }
}

/// The error of a non-2xx answer, and its headers: the body is read up to
/// [`limits::MAX_ERROR_BODY_BYTES`] and within the header timeout.
pub async fn answer_error(resp: reqwest::Response, limits: &Limits) -> (ProviderError, HeaderMap) {
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = limits::read_capped(resp, limits.header_timeout).await;
    let now = crate::clock::now_ms();
    (status_error(status, &headers, &body, now, limits), headers)
}

/// Builds the error for a non-2xx answer from its status, headers and (JSON) body.
pub fn status_error(
    status: u16,
    headers: &HeaderMap,
    body: &str,
    now_ms: i64,
    limits: &Limits,
) -> ProviderError {
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
        message: limits::error_text(&message.unwrap_or_else(|| short(body))),
        retry_after: retry_after(headers, now_ms, limits),
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
    let s = |k: &str| err.get(k).and_then(|x| x.as_str()).map(limits::error_text);
    let code = s("code").or_else(|| err.get("code").map(|c| limits::error_text(&c.to_string())));
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
        message: limits::error_text(&message.unwrap_or_else(|| "error event in the stream".into())),
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
        // Without its URL: a base URL may carry user-info or a query with a secret in it.
        // reqwest's Display never includes headers.
        let e = e.without_url();
        let mut message = e.to_string();
        let mut src = std::error::Error::source(&e);
        while let Some(s) = src {
            message = format!("{message}: {s}");
            src = s.source();
        }
        ProviderError::Transport {
            message: limits::error_text(&message),
        }
    }
}

/// Turns a 2xx SSE body into stream items with a provider's per-event parser
/// (`parse(event_name, data)`). The stream ends after the parser yields `Done`; a body that
/// ends or breaks before that is a `StreamCut` ("ended before `what_ends`").
pub fn item_stream<F>(
    resp: reqwest::Response,
    what_ends: &'static str,
    limits: &Limits,
    parse: F,
) -> DeltaStream
where
    F: FnMut(&str, &str) -> Result<Vec<StreamItem>, ProviderError> + Send + 'static,
{
    let state = (
        guarded(resp.bytes_stream(), limits.max_event_bytes).eventsource(),
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
                    Some(Err(EventStreamError::Transport(Read::TooLarge(max)))) => {
                        ProviderError::Protocol {
                            message: format!("an event or line longer than {max} bytes"),
                        }
                    }
                    Some(Err(e)) => ProviderError::StreamCut {
                        message: limits::error_text(&e.to_string()),
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

/// A failure reading the body: the transport's (its text as [`ProviderError::Transport`]
/// words it: no URL, the source chain), or an event past the size cap.
#[derive(Debug)]
pub enum Read {
    Transport(String),
    TooLarge(usize),
}

impl std::fmt::Display for Read {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Read::Transport(message) => write!(f, "{message}"),
            Read::TooLarge(max) => write!(f, "an event or line longer than {max} bytes"),
        }
    }
}

impl std::error::Error for Read {}

/// The body's chunks, failed with [`Read::TooLarge`] as soon as one SSE event (the bytes
/// since the last blank line) passes `max` bytes, so that no line or event is ever buffered
/// whole past the cap. One pass over each chunk's bytes; nothing is copied.
fn guarded<B: AsRef<[u8]> + Send + 'static>(
    body: impl Stream<Item = Result<B, reqwest::Error>> + Send + 'static,
    max: usize,
) -> impl Stream<Item = Result<B, Read>> + Send + 'static {
    let mut scan = EventSize::default();
    let mut failed = false;
    body.map(move |chunk| {
        if failed {
            return Err(Read::TooLarge(max));
        }
        let chunk = chunk.map_err(|e| match ProviderError::from(e) {
            ProviderError::Transport { message } => Read::Transport(message),
            other => Read::Transport(other.to_string()),
        })?;
        if scan.feed(chunk.as_ref(), max) {
            Ok(chunk)
        } else {
            failed = true;
            Err(Read::TooLarge(max))
        }
    })
}

/// How far into the current line and event a byte stream is.
#[derive(Default)]
struct EventSize {
    line: usize,
    event: usize,
}

impl EventSize {
    /// Takes the next bytes; false once the current event passes `max`.
    fn feed(&mut self, bytes: &[u8], max: usize) -> bool {
        for &b in bytes {
            match b {
                b'\n' => {
                    if self.line == 0 {
                        self.event = 0; // a blank line ends the event
                    }
                    self.line = 0;
                }
                b'\r' => {}
                _ => {
                    self.line += 1;
                    self.event += 1;
                }
            }
        }
        self.event <= max
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    const DAY_MS: i64 = 86_400_000;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn until(h: &HeaderMap, now: i64) -> i64 {
        crate::retry::classify::until(retry_after(h, now, &Limits::default()).unwrap(), now)
    }

    #[test]
    fn absurd_advised_waits_are_clamped_to_a_day() {
        let now = 1_700_000_000_000;
        for h in [
            headers(&[("retry-after", "300000000000")]),
            headers(&[("retry-after", "1e308")]),
            headers(&[("retry-after-ms", "18446744073709551615")]),
            headers(&[("retry-after-ms", "1e300")]),
            headers(&[("retry-after", "Fri, 31 Dec 9999 23:59:59 GMT")]),
        ] {
            assert_eq!(until(&h, now), now + DAY_MS, "{h:?}");
        }
        // Sane values are kept exactly.
        assert_eq!(until(&headers(&[("retry-after", "30")]), now), now + 30_000);
        assert_eq!(
            until(&headers(&[("retry-after-ms", "1500")]), now),
            now + 1_500
        );
        // Negative, non-finite and unreadable values are no advice.
        for v in ["-5", "NaN", "inf", "soon"] {
            assert_eq!(
                retry_after(&headers(&[("retry-after", v)]), now, &Limits::default()),
                None,
                "{v}"
            );
        }
    }

    #[test]
    fn a_large_error_body_becomes_a_short_message() {
        let body = format!(r#"{{"error":{{"message":"{}"}}}}"#, "x".repeat(100_000));
        let err = status_error(500, &HeaderMap::new(), &body, 0, &Limits::default());
        let shown = err.to_string();
        assert!(shown.len() < 1_200, "{} bytes", shown.len());
        assert!(shown.contains("cut"), "says it was cut");
    }

    #[test]
    fn an_event_past_the_cap_is_caught_without_a_newline() {
        let mut size = EventSize::default();
        assert!(size.feed(b"data: hello\n\n", 16));
        assert!(size.feed(b"data: 0123456789\n", 16)); // 16 bytes: at the cap
        assert!(!size.feed(b"x", 16), "the event passed the cap");
        let mut size = EventSize::default();
        // Many small events never add up.
        for _ in 0..10_000 {
            assert!(size.feed(b"data: {\"a\":1}\r\n\r\n", 16));
        }
        // A line with no newline at all, fed in pieces.
        let mut size = EventSize::default();
        assert!(size.feed(&[b'a'; 10], 16));
        assert!(!size.feed(&[b'a'; 10], 16));
    }
}
