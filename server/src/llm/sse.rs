//! Reading provider responses: their SSE bodies as stream items ([`SseLines`]), and the
//! error answer's fields, every one bounded by the provider's [`Limits`].
use super::limits::{self, Limits};
use super::{DeltaStream, ProviderError, RetryAfter, StreamItem};
use crate::sse_lines::SseLines;
use futures::StreamExt;
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
/// ends or breaks before that is a `StreamCut` ("ended before `what_ends`"). Each chunk is
/// read as it comes ([`SseLines`]: no copy per event); the items of one chunk go out in order,
/// and a chunk that completes none yields [`StreamItem::Heard`], so that the idle limit counts
/// bytes, not parsed items.
pub fn item_stream<F>(
    resp: reqwest::Response,
    what_ends: &'static str,
    limits: &Limits,
    parse: F,
) -> DeltaStream
where
    F: FnMut(&str, &str) -> Result<Vec<StreamItem>, ProviderError> + Send + 'static,
{
    let reader = Reader {
        body: resp.bytes_stream().boxed(),
        lines: SseLines::new(limits.max_event_bytes),
        pending: VecDeque::new(),
        ended: false,
        parse,
        what_ends,
    };
    futures::stream::unfold(reader, |mut r| async move {
        let item = r.next().await?;
        Some((item, r))
    })
    .boxed()
}

/// [`item_stream`]'s state: the body, the event reader and the items read but not yet taken.
struct Reader<F> {
    body: futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    lines: SseLines,
    pending: VecDeque<Result<StreamItem, ProviderError>>,
    /// `Done` or a failure is pending: nothing more is read.
    ended: bool,
    parse: F,
    what_ends: &'static str,
}

impl<F> Reader<F>
where
    F: FnMut(&str, &str) -> Result<Vec<StreamItem>, ProviderError>,
{
    async fn next(&mut self) -> Option<Result<StreamItem, ProviderError>> {
        loop {
            if let Some(item) = self.pending.pop_front() {
                return Some(item);
            }
            if self.ended {
                return None;
            }
            let chunk = match self.body.next().await {
                Some(Ok(chunk)) => chunk,
                None => {
                    self.ended = true;
                    return Some(Err(ProviderError::StreamCut {
                        message: format!("ended before {}", self.what_ends),
                    }));
                }
                Some(Err(e)) => {
                    self.ended = true;
                    let message = match ProviderError::from(e) {
                        ProviderError::Transport { message } => message,
                        other => other.to_string(),
                    };
                    return Some(Err(ProviderError::StreamCut {
                        message: limits::error_text(&message),
                    }));
                }
            };
            let (pending, parse, ended) = (&mut self.pending, &mut self.parse, &mut self.ended);
            let read = self.lines.feed(&chunk, |e| {
                match parse(e.name, e.data) {
                    Ok(items) => {
                        *ended = items.contains(&StreamItem::Done);
                        pending.extend(items.into_iter().map(Ok));
                    }
                    Err(e) => {
                        *ended = true;
                        pending.push_back(Err(e));
                    }
                }
                !*ended
            });
            if let Err(malformed) = read {
                self.ended = true;
                self.pending.push_back(Err(ProviderError::Protocol {
                    message: malformed.to_string(),
                }));
            }
            // Any bytes keep the stream alive, whether or not they completed an item.
            if self.pending.is_empty() && !chunk.is_empty() {
                return Some(Ok(StreamItem::Heard));
            }
        }
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
}
