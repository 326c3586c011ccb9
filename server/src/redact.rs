//! Secrets out of outside text: the configured secrets (the API key, MCP `env`/`headers`
//! values) and bearer-looking tokens become `[redacted]` in what a provider or tool server sends.
use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

/// What a secret is replaced by.
pub const REDACTED: &str = "[redacted]";
/// Configured values shorter than this are no real secret, and replacing them would eat
/// ordinary words.
pub const MIN_SECRET_CHARS: usize = 8;
/// A `Bearer` credential is at least this long, and holds a digit unless it is at least
/// [`MIN_WORDLIKE_BEARER_CHARS`] long (so "bearer authentication" stays as it is).
const MIN_BEARER_CHARS: usize = 8;
const MIN_WORDLIKE_BEARER_CHARS: usize = 20;
/// An `sk-`-style key is its prefix and at least this many more characters.
const MIN_KEY_CHARS: usize = 16;
/// What a cut text ends with (`llm::limits::truncate`, tool results).
const CUT: char = '…';
/// The fewest characters of a configured secret that a cut may not leave.
const MIN_CUT_CHARS: usize = 4;
/// How far before a cut a secret's start is looked for.
const MAX_CUT_WORD_CHARS: usize = 256;
/// Prefixes of API keys as providers issue them (`sk-…`, `sk_live_…`).
const KEY_PREFIXES: [&str; 2] = ["sk-", "sk_"];

/// The secrets to replace, built once from the configuration. Cheap to clone; its Debug
/// output shows how many secrets it holds, never one of them.
#[derive(Clone, Default)]
pub struct Redactor {
    /// Longest first, so a secret that contains another is replaced whole.
    secrets: Arc<[String]>,
}

impl fmt::Debug for Redactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Redactor({} secrets)", self.secrets.len())
    }
}

impl Redactor {
    /// The secrets among `values` of at least [`MIN_SECRET_CHARS`] characters. A value of
    /// several words (`Bearer xyz…`) also yields its last word, which is what an error quotes.
    pub fn new<I, S>(values: I) -> Redactor
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Redactor::with_min_chars(values, MIN_SECRET_CHARS)
    }

    /// [`Redactor::new`] with another threshold (a server's own secrets in its own error
    /// text may be shorter).
    pub fn with_min_chars<I, S>(values: I, min_chars: usize) -> Redactor
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut secrets: Vec<String> = Vec::new();
        for value in values {
            let value = value.as_ref().trim();
            let last = value.split_whitespace().last().unwrap_or_default();
            for s in [value, last] {
                if s.chars().count() >= min_chars.max(1) && !secrets.iter().any(|k| k == s) {
                    secrets.push(s.to_string());
                }
            }
        }
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        Redactor {
            secrets: secrets.into(),
        }
    }

    /// Both sets of secrets.
    pub fn and(&self, other: &Redactor) -> Redactor {
        let mut secrets: Vec<String> = self.secrets.to_vec();
        for s in other.secrets.iter() {
            if !secrets.contains(s) {
                secrets.push(s.clone());
            }
        }
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        Redactor {
            secrets: secrets.into(),
        }
    }

    /// `text` with every configured secret, `Bearer` credential and `sk-`-style key replaced.
    pub fn redact<'t>(&self, text: &'t str) -> Cow<'t, str> {
        let mut out = Cow::Borrowed(text);
        for secret in self.secrets.iter() {
            if out.contains(secret.as_str()) {
                out = Cow::Owned(out.replace(secret.as_str(), REDACTED));
            }
        }
        if let Some(clean) = redact_tokens(&out) {
            out = Cow::Owned(clean);
        }
        match self.redact_cut_starts(&out) {
            Some(clean) => Cow::Owned(clean),
            None => out,
        }
    }

    /// `text` with the start of a secret that a cut left just before its ellipsis replaced
    /// (text is cut before it reaches the redactor: a key at the cut must not leave its
    /// first characters), or `None` when no cut ends on one.
    fn redact_cut_starts(&self, text: &str) -> Option<String> {
        let mut out = String::new();
        let mut copied = 0;
        for (at, _) in text.match_indices(CUT) {
            let before = &text[copied..at];
            let word_at = before
                .char_indices()
                .rev()
                .take_while(|&(_, c)| token_char(c) || c.is_whitespace())
                .take(MAX_CUT_WORD_CHARS)
                .last()
                .map_or(before.len(), |(i, _)| i);
            // The longest tail of what precedes the ellipsis that starts a secret.
            let secret_at = before[word_at..].char_indices().find_map(|(i, _)| {
                self.secret_start(&before[word_at + i..])
                    .map(|k| word_at + i + k)
            });
            if let Some(i) = secret_at {
                out.push_str(&text[copied..copied + i]);
                out.push_str(REDACTED);
                copied = at;
            }
        }
        if copied == 0 {
            return None;
        }
        out.push_str(&text[copied..]);
        Some(out)
    }

    /// Where in `tail` (a cut's last characters) a secret starts, if it is one's start: a
    /// configured secret's (at least [`MIN_CUT_CHARS`] of it), an `sk-`-style key's, or a
    /// `Bearer` credential's.
    fn secret_start(&self, tail: &str) -> Option<usize> {
        if tail.starts_with(char::is_whitespace) {
            return None;
        }
        if let Some(rest) = tail
            .get(..6)
            .filter(|w| w.eq_ignore_ascii_case("bearer"))
            .map(|_| &tail[6..])
        {
            let credential = rest.trim_start();
            let spaced = credential.len() < rest.len();
            if spaced && !credential.is_empty() && credential.chars().all(token_char) {
                return Some(tail.len() - credential.len());
            }
        }
        let n = tail.chars().count();
        let configured = n >= MIN_CUT_CHARS && self.secrets.iter().any(|s| s.starts_with(tail));
        let key = n > 3 && KEY_PREFIXES.iter().any(|p| tail.starts_with(p));
        (configured || key).then_some(0)
    }

    /// [`Redactor::redact`], owned.
    pub fn redact_owned(&self, text: String) -> String {
        match self.redact(&text) {
            Cow::Borrowed(_) => text,
            Cow::Owned(clean) => clean,
        }
    }
}

/// The characters of a token: base64, base64url and the usual separators.
fn token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '~' | '+' | '/' | '=')
}

/// `text` with bearer-looking tokens replaced, or `None` when it holds none.
fn redact_tokens(text: &str) -> Option<String> {
    let mut out = String::new();
    let mut copied = 0; // bytes of `text` already in `out`
    let mut at = 0;
    while at < text.len() {
        let rest = &text[at..];
        let boundary = text[..at]
            .chars()
            .next_back()
            .is_none_or(|c| !c.is_alphanumeric() && c != '_' && c != '-');
        let token_at = if !boundary {
            None
        } else if rest
            .get(..6)
            .is_some_and(|w| w.eq_ignore_ascii_case("bearer"))
        {
            // `Bearer`, whitespace, then a credential: the credential goes.
            let after = &rest[6..];
            let gap = after.len() - after.trim_start().len();
            let len = token_len(&after[gap..]);
            let credential = &after[gap..gap + len];
            let looks_like_one = len >= MIN_WORDLIKE_BEARER_CHARS
                || (len >= MIN_BEARER_CHARS && credential.contains(|c: char| c.is_ascii_digit()));
            (gap > 0 && looks_like_one).then_some((at + 6 + gap, len))
        } else if KEY_PREFIXES.iter().any(|p| rest.starts_with(p)) {
            let len = token_len(rest);
            (len >= 3 + MIN_KEY_CHARS).then_some((at, len))
        } else {
            None
        };
        match token_at {
            Some((start, len)) => {
                out.push_str(&text[copied..start]);
                out.push_str(REDACTED);
                copied = start + len;
                at = copied;
            }
            None => at += rest.chars().next().map_or(1, char::len_utf8),
        }
    }
    if copied == 0 {
        return None;
    }
    out.push_str(&text[copied..]);
    Some(out)
}

/// How many bytes at the start of `s` are token characters (a final `.` ends a sentence).
fn token_len(s: &str) -> usize {
    let end = s.find(|c: char| !token_char(c)).unwrap_or(s.len());
    s[..end].trim_end_matches('.').len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configured_secrets_are_replaced_wherever_they_appear() {
        let r = Redactor::new(["s3cr3t-value-1", "short", "Bearer tok-abcdefgh"]);
        assert_eq!(
            r.redact("key s3cr3t-value-1, again:s3cr3t-value-1."),
            "key [redacted], again:[redacted]."
        );
        // Too short to be a secret: ordinary words stay.
        assert_eq!(r.redact("a short answer"), "a short answer");
        // A header value's credential alone is replaced too.
        assert_eq!(
            r.redact("token tok-abcdefgh refused"),
            "token [redacted] refused"
        );
        assert!(matches!(r.redact("nothing here"), Cow::Borrowed(_)));
    }

    #[test]
    fn a_secret_cut_short_leaves_none_of_its_characters() {
        let key = "pk-live-0123456789abcdef";
        let r = Redactor::new([key]);
        for n in [4, 10, key.len() - 1] {
            let text = format!("proxy said: key={}… (cut: 9000 bytes in all)", &key[..n]);
            let clean = r.redact(&text);
            assert_eq!(
                clean, "proxy said: key=[redacted]… (cut: 9000 bytes in all)",
                "cut after {n}"
            );
        }
        // An unconfigured `sk-` key and a Bearer credential cut short go too.
        let r = Redactor::default();
        assert_eq!(r.redact("sk-ab12… (cut)"), "[redacted]… (cut)");
        assert_eq!(r.redact("Bearer x… (cut)"), "Bearer [redacted]… (cut)");
        // Ordinary text before a cut stays.
        let r = Redactor::new([key]);
        assert_eq!(r.redact("a plain sentence…"), "a plain sentence…");
        assert_eq!(r.redact("word pk… and"), "word pk… and");
    }

    #[test]
    fn a_secret_containing_another_is_replaced_whole() {
        let r = Redactor::new(["abcdefgh", "abcdefgh-longer"]);
        assert_eq!(r.redact("x abcdefgh-longer y"), "x [redacted] y");
    }

    #[test]
    fn bearer_credentials_and_sk_keys_are_replaced_without_configuration() {
        let r = Redactor::default();
        assert_eq!(
            r.redact("Authorization: Bearer eyJhbGciOi.J9x_y-z== was refused"),
            "Authorization: Bearer [redacted] was refused"
        );
        assert_eq!(r.redact("bearer  abcdefgh1"), "bearer  [redacted]");
        assert_eq!(
            r.redact("Incorrect API key provided: sk-proj-AbCdEf0123456789xyz."),
            "Incorrect API key provided: [redacted]."
        );
        assert_eq!(
            r.redact("key=sk_live_0123456789abcdefXYZ"),
            "key=[redacted]"
        );
        // Too short, or inside a word: left alone.
        for kept in [
            "Bearer abc",
            "the bearer of bad news",
            "Bearer authentication failed",
            "sk-short",
            "task-0123456789abcdefghij",
            "disk_0123456789abcdefghij",
        ] {
            assert_eq!(r.redact(kept), kept);
        }
        // Multi-byte text around a token.
        assert_eq!(
            r.redact("é Bearer ñ0123456789 é"),
            "é Bearer ñ0123456789 é",
            "a credential is ASCII token characters"
        );
        assert_eq!(r.redact("é sk-0123456789abcdefgh é"), "é [redacted] é");
    }

    #[test]
    fn both_sets_are_joined_and_debug_shows_no_secret() {
        let a = Redactor::new(["first-secret"]);
        let b = Redactor::with_min_chars(["tiny"], 4);
        let both = a.and(&b);
        assert_eq!(both.redact("first-secret tiny"), "[redacted] [redacted]");
        assert_eq!(format!("{both:?}"), "Redactor(2 secrets)");
    }
}
