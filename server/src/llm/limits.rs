//! Bounds on what a provider may send: advised waits, how long it may take to answer, how
//! large its error bodies, stream events and token counts may be. Pure, apart from
//! [`read_capped`] which reads an error body within them.
use std::time::Duration;

/// An error body is read up to this many bytes; the rest is never read.
pub const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;
/// Error text kept on a run, an attempt or in a log line is cut to this many characters.
pub const MAX_ERROR_TEXT_CHARS: usize = 1024;
/// A continuation message quotes at most this many characters of why the turn was cut off.
pub const MAX_QUOTED_REASON_CHARS: usize = 160;
/// One provider call reports at most this many tokens; a larger count is taken as this.
/// (No real call comes near it, and sums of it can never overflow a 64-bit column.)
pub const MAX_TOKENS_PER_CALL: u64 = 100_000_000;

/// The limits a provider adapter enforces on every call (settings, CONTRACT §2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The longest advised wait believed (`Retry-After`, `retry-after-ms`, reset headers).
    pub max_advised_wait: Duration,
    /// How long a provider may take to answer a call's status line and headers.
    pub header_timeout: Duration,
    /// The largest SSE line or event accepted; a larger one fails the call as a protocol error.
    pub max_event_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_advised_wait: Duration::from_secs(24 * 3600),
            header_timeout: Duration::from_secs(60),
            max_event_bytes: 1024 * 1024,
        }
    }
}

impl Limits {
    /// `wait`, or the maximum when the provider advised longer.
    pub fn clamp_wait(&self, wait: Duration) -> Duration {
        wait.min(self.max_advised_wait)
    }

    /// An absolute advised time `at` (epoch ms), no later than the maximum from `now_ms`.
    pub fn clamp_until(&self, at: i64, now_ms: i64) -> i64 {
        at.min(now_ms.saturating_add(millis(self.max_advised_wait)))
    }
}

/// A duration in whole milliseconds as an `i64`, saturating.
pub fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// A token count from a provider, within [`MAX_TOKENS_PER_CALL`].
pub fn tokens(reported: u64) -> u64 {
    reported.min(MAX_TOKENS_PER_CALL)
}

/// `text` cut to `max` characters (on a character boundary), marked when cut.
pub fn truncate(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_string(),
        Some((at, _)) => format!("{}… (cut: {} bytes in all)", &text[..at], text.len()),
    }
}

/// Provider error text as kept on a run or an attempt: at most [`MAX_ERROR_TEXT_CHARS`].
pub fn error_text(text: &str) -> String {
    truncate(text, MAX_ERROR_TEXT_CHARS)
}

/// A short, single-line, printable reason to quote to the model in a continuation: control
/// characters and runs of whitespace become one space, cut at [`MAX_QUOTED_REASON_CHARS`].
pub fn quoted_reason(text: &str) -> String {
    let mut out = String::new();
    let mut space = false;
    for c in text.chars() {
        if c.is_whitespace() || c.is_control() {
            space = !out.is_empty();
            continue;
        }
        if out.chars().count() >= MAX_QUOTED_REASON_CHARS {
            out.push('…');
            return out;
        }
        if space {
            out.push(' ');
            space = false;
        }
        out.push(c);
    }
    out
}

/// An HTTP date for epoch milliseconds that never panics: times beyond what an HTTP date can
/// say (after 9999) read as the last second it can.
pub fn http_date(ms: i64) -> String {
    const LAST: u64 = 253_402_300_799; // 9999-12-31T23:59:59Z
    let secs = u64::try_from(ms.max(0) / 1000).unwrap_or(0).min(LAST);
    httpdate::fmt_http_date(std::time::UNIX_EPOCH + Duration::from_secs(secs))
}

/// A provider URL fit to show, log or keep: without user-info, query or fragment (where a
/// secret may sit). Unparsable text is cut at its first `?` and after its last `@`.
pub fn redacted_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut u) => {
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.set_query(None);
            u.set_fragment(None);
            u.to_string().trim_end_matches('/').to_string()
        }
        Err(_) => {
            let head = url.split(['?', '#']).next().unwrap_or("");
            match head.split_once("://") {
                Some((scheme, rest)) => {
                    let rest = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
                    format!("{scheme}://{rest}")
                }
                None => head.rsplit_once('@').map_or(head, |(_, h)| h).to_string(),
            }
        }
    }
}

/// Reads an error body: at most [`MAX_ERROR_BODY_BYTES`] and within `deadline`; what is past
/// either is not read (the connection is dropped with the response).
pub async fn read_capped(mut resp: reqwest::Response, deadline: Duration) -> String {
    let mut body: Vec<u8> = Vec::new();
    let read = async {
        while let Ok(Some(chunk)) = resp.chunk().await {
            let room = MAX_ERROR_BODY_BYTES.saturating_sub(body.len());
            body.extend_from_slice(&chunk[..chunk.len().min(room)]);
            if body.len() >= MAX_ERROR_BODY_BYTES {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(deadline, read).await;
    String::from_utf8_lossy(&body).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_are_clamped_to_the_maximum() {
        let l = Limits::default();
        assert_eq!(
            l.clamp_wait(Duration::from_secs(300_000_000_000)),
            Duration::from_secs(86_400)
        );
        assert_eq!(l.clamp_wait(Duration::from_secs(5)), Duration::from_secs(5));
        assert_eq!(l.clamp_until(i64::MAX, 1_000), 1_000 + 86_400_000);
        assert_eq!(l.clamp_until(5_000, 1_000), 5_000);
        // No overflow near the end of time.
        assert_eq!(l.clamp_until(i64::MAX, i64::MAX - 1), i64::MAX);
        assert_eq!(millis(Duration::MAX), i64::MAX);
    }

    #[test]
    fn token_counts_are_capped() {
        assert_eq!(tokens(u64::MAX), MAX_TOKENS_PER_CALL);
        assert_eq!(tokens(12), 12);
        assert!(i64::try_from(MAX_TOKENS_PER_CALL).is_ok());
    }

    #[test]
    fn text_is_cut_on_a_character_boundary() {
        assert_eq!(truncate("héllo", 10), "héllo");
        let cut = truncate(&"é".repeat(3000), MAX_ERROR_TEXT_CHARS);
        assert!(cut.starts_with(&"é".repeat(MAX_ERROR_TEXT_CHARS)));
        assert!(cut.ends_with("(cut: 6000 bytes in all)"), "{cut}");
        assert!(cut.chars().count() < MAX_ERROR_TEXT_CHARS + 40);
    }

    #[test]
    fn quoted_reasons_are_one_short_printable_line() {
        assert_eq!(
            quoted_reason("  provider\nanswered\t\u{7}503:   busy "),
            "provider answered 503: busy"
        );
        let long = quoted_reason(&"x".repeat(10_000));
        assert_eq!(long.chars().count(), MAX_QUOTED_REASON_CHARS + 1);
        assert!(long.ends_with('…'));
    }

    #[test]
    fn urls_lose_their_secrets() {
        assert_eq!(
            redacted_url("https://user:pw@api.example/v1/?key=sk-1#x"),
            "https://api.example/v1"
        );
        assert_eq!(
            redacted_url("http://127.0.0.1:8000/v1"),
            "http://127.0.0.1:8000/v1"
        );
        assert_eq!(redacted_url("not a url?key=1"), "not a url");
        assert_eq!(redacted_url("x://a:b@host?q"), "x://host");
    }

    #[test]
    fn http_dates_never_panic() {
        assert_eq!(http_date(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(http_date(i64::MAX), "Fri, 31 Dec 9999 23:59:59 GMT");
        assert_eq!(http_date(-5), "Thu, 01 Jan 1970 00:00:00 GMT");
    }
}
