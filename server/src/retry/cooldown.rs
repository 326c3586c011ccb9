//! Provider-wide cooldowns: which provider, endpoint, key (hashed) and model a provider asked
//! to wait, until when and why (pure), and the [`Table`] they are kept in — the database in
//! the server, so every instance and the next start see them. Expired entries vanish.
use super::classify;
use crate::llm::ProviderError;
use app::wire::{Cooldown, RetryClass};
use futures::future::BoxFuture;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Mutex;

/// How many hex digits of the API key's SHA-256 a shown key carries.
const SHOWN_HASH_DIGITS: usize = 12;

/// Who a cooldown holds: provider kind, endpoint (base URL), credential and model.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    provider: String,
    endpoint: String,
    /// Hex SHA-256 of the API key: the key itself is never kept here.
    credential: Option<String>,
    model: String,
}

impl Key {
    pub fn new(provider: &str, endpoint: &str, api_key: Option<&str>, model: &str) -> Key {
        Key {
            provider: provider.to_string(),
            endpoint: crate::llm::limits::redacted_url(endpoint)
                .trim_end_matches('/')
                .to_string(),
            credential: api_key.filter(|k| !k.is_empty()).map(credential_hash),
            model: model.to_string(),
        }
    }

    /// The same provider, endpoint and credential, for `model`.
    pub fn for_model(&self, model: &str) -> Key {
        Key {
            model: model.to_string(),
            ..self.clone()
        }
    }

    /// The key's identity as stored: provider, endpoint, the whole credential hash, model.
    pub fn id(&self) -> String {
        format!(
            "{} {} model={} cred={}",
            self.provider,
            self.endpoint,
            self.model,
            self.credential.as_deref().unwrap_or("none")
        )
    }

    /// The key without secrets, as listed and cleared over the API:
    /// `openai https://api.example/v1 model=gpt-x key=sha256:ab12cd34ef56` (or `key=none`).
    pub fn shown(&self) -> String {
        let key = match &self.credential {
            Some(h) => format!("sha256:{}", &h[..SHOWN_HASH_DIGITS]),
            None => "none".into(),
        };
        format!(
            "{} {} model={} key={key}",
            self.provider, self.endpoint, self.model
        )
    }
}

/// The hex SHA-256 of an API key.
fn credential_hash(api_key: &str) -> String {
    Sha256::digest(api_key.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A cooldown in force: its deadline (epoch ms) and the class of the answer that advised it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wait {
    pub until: i64,
    pub reason: RetryClass,
}

impl Wait {
    /// The error a run gets instead of a request while this wait holds.
    pub fn refusal(&self) -> ProviderError {
        ProviderError::CoolingDown {
            class: self.reason.clone(),
            until: self.until,
        }
    }
}

/// The cooldown a failed answer asks for: `(until, reason)` when the provider advised a wait
/// (`Retry-After`, `retry-after-ms`, reset headers) on a `rate_limited` or `overloaded`
/// answer, or on a `quota_exhausted` one (kept apart: its own reason, never retried in-run).
pub fn advised(err: &ProviderError, now_ms: i64) -> Option<(i64, RetryClass)> {
    let ProviderError::Status {
        retry_after: Some(advice),
        ..
    } = err
    else {
        return None;
    };
    let reason = match classify::classify(err, false, now_ms).retry_class {
        c @ (RetryClass::RateLimited | RetryClass::Overloaded | RetryClass::QuotaExhausted) => c,
        _ => return None,
    };
    let until = classify::until(*advice, now_ms);
    (until > now_ms).then_some((until, reason))
}

/// A cooldown's reason read back from storage, as one of the classes that start cooldowns.
pub fn reason_of(stored: &str) -> RetryClass {
    match RetryClass::parse(stored) {
        c @ (RetryClass::Overloaded | RetryClass::QuotaExhausted) => c,
        _ => RetryClass::RateLimited,
    }
}

/// Where cooldowns are kept: the store (shared by every instance on its database, kept across
/// restarts) or, for tests of the gate, [`Cooldowns`] in memory. Both follow one rule: the
/// later deadline wins, and what has ended is gone.
pub trait Table: Send + Sync {
    fn note(&self, key: Key, until: i64, reason: RetryClass, now: i64) -> BoxFuture<'_, ()>;
    fn check<'a>(&'a self, key: &'a Key, now: i64) -> BoxFuture<'a, Option<Wait>>;
    fn list(&self, now: i64) -> BoxFuture<'_, Vec<Cooldown>>;
    fn clear<'a>(&'a self, shown: &'a str, now: i64) -> BoxFuture<'a, Option<Cooldown>>;
}

/// A cooldown table in memory (one process).
#[derive(Default)]
pub struct Cooldowns {
    table: Mutex<HashMap<Key, Wait>>,
}

impl Table for Cooldowns {
    fn note(&self, key: Key, until: i64, reason: RetryClass, now: i64) -> BoxFuture<'_, ()> {
        self.note_now(key, until, reason, now);
        Box::pin(async {})
    }
    fn check<'a>(&'a self, key: &'a Key, now: i64) -> BoxFuture<'a, Option<Wait>> {
        let w = self.check_now(key, now);
        Box::pin(async move { w })
    }
    fn list(&self, now: i64) -> BoxFuture<'_, Vec<Cooldown>> {
        let l = self.list_now(now);
        Box::pin(async move { l })
    }
    fn clear<'a>(&'a self, shown: &'a str, now: i64) -> BoxFuture<'a, Option<Cooldown>> {
        let c = self.clear_now(shown, now);
        Box::pin(async move { c })
    }
}

impl Cooldowns {
    /// Records that the provider asked `key` to wait until `until`. The later deadline wins
    /// over one already in force; a deadline not after `now` is ignored.
    pub fn note_now(&self, key: Key, until: i64, reason: RetryClass, now: i64) {
        if until <= now {
            return;
        }
        let mut table = self.table.lock().expect("cooldowns");
        table.retain(|_, w| w.until > now);
        let wait = table.entry(key).or_insert_with(|| Wait {
            until,
            reason: reason.clone(),
        });
        if until > wait.until {
            *wait = Wait { until, reason };
        }
    }

    /// The wait in force for `key` at `now`, if any.
    pub fn check_now(&self, key: &Key, now: i64) -> Option<Wait> {
        let mut table = self.table.lock().expect("cooldowns");
        match table.get(key) {
            Some(w) if w.until > now => Some(w.clone()),
            Some(_) => {
                table.remove(key);
                None
            }
            None => None,
        }
    }

    /// Every cooldown in force at `now`, soonest to end first.
    pub fn list_now(&self, now: i64) -> Vec<Cooldown> {
        let mut table = self.table.lock().expect("cooldowns");
        table.retain(|_, w| w.until > now);
        let mut all: Vec<Cooldown> = table
            .iter()
            .map(|(k, w)| Cooldown {
                key: k.shown(),
                until: w.until,
                reason: w.reason.clone(),
            })
            .collect();
        all.sort_by(|a, b| (a.until, &a.key).cmp(&(b.until, &b.key)));
        all
    }

    /// Ends the cooldown shown as `shown` (see [`Key::shown`]); `None` when none is in force.
    pub fn clear_now(&self, shown: &str, now: i64) -> Option<Cooldown> {
        let mut table = self.table.lock().expect("cooldowns");
        table.retain(|_, w| w.until > now);
        let key = table.keys().find(|k| k.shown() == shown)?.clone();
        let wait = table.remove(&key)?;
        Some(Cooldown {
            key: shown.to_string(),
            until: wait.until,
            reason: wait.reason,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::RetryAfter;
    use std::time::Duration;

    const SECRET: &str = "sk-live-very-secret-123";

    fn key(model: &str, api_key: Option<&str>) -> Key {
        Key::new("openai", "https://api.example/v1/", api_key, model)
    }

    fn answer(status: u16, kind: &str, wait: Option<RetryAfter>) -> ProviderError {
        ProviderError::Status {
            status,
            error_type: (!kind.is_empty()).then(|| kind.to_string()),
            error_code: None,
            message: "x".into(),
            retry_after: wait,
            should_retry: None,
        }
    }

    #[test]
    fn a_shown_key_names_provider_endpoint_model_and_a_hash_prefix_only() {
        let shown = key("gpt-x", Some(SECRET)).shown();
        let hash = credential_hash(SECRET);
        assert_eq!(
            shown,
            format!(
                "openai https://api.example/v1 model=gpt-x key=sha256:{}",
                &hash[..12]
            )
        );
        assert!(!shown.contains(SECRET));
        assert!(!shown.contains(&hash), "only a prefix of the hash");
        assert_eq!(
            key("gpt-x", None).shown(),
            "openai https://api.example/v1 model=gpt-x key=none"
        );
        assert_eq!(key("gpt-x", Some("")), key("gpt-x", None));
    }

    #[test]
    fn keys_differ_by_provider_endpoint_credential_and_model() {
        let base = key("m", Some("a"));
        assert_ne!(base, key("m", Some("b")));
        assert_ne!(base, key("n", Some("a")));
        assert_ne!(
            base,
            Key::new("anthropic", "https://api.example/v1", Some("a"), "m")
        );
        assert_ne!(base, Key::new("openai", "https://other/v1", Some("a"), "m"));
        assert_eq!(
            base,
            Key::new("openai", "https://api.example/v1", Some("a"), "m")
        );
        assert_eq!(base, key("other", Some("a")).for_model("m"));
    }

    #[test]
    fn a_cooldown_holds_its_key_only_until_its_deadline() {
        let t = Cooldowns::default();
        t.note_now(key("m", Some("a")), 5_000, RetryClass::RateLimited, 1_000);
        let wait = t.check_now(&key("m", Some("a")), 4_999).expect("in force");
        assert_eq!((wait.until, wait.reason), (5_000, RetryClass::RateLimited));
        assert_eq!(t.check_now(&key("other", Some("a")), 2_000), None);
        assert_eq!(t.check_now(&key("m", Some("b")), 2_000), None);
        assert_eq!(t.check_now(&key("m", Some("a")), 5_000), None, "expired");
        assert!(t.list_now(0).is_empty(), "an expired entry vanishes");
    }

    #[test]
    fn the_later_deadline_wins_and_past_ones_are_ignored() {
        let t = Cooldowns::default();
        let k = key("m", None);
        t.note_now(k.clone(), 9_000, RetryClass::RateLimited, 1_000);
        t.note_now(k.clone(), 3_000, RetryClass::Overloaded, 1_000);
        assert_eq!(t.check_now(&k, 1_000).unwrap().until, 9_000);
        t.note_now(k.clone(), 20_000, RetryClass::QuotaExhausted, 1_000);
        let w = t.check_now(&k, 1_000).unwrap();
        assert_eq!((w.until, w.reason), (20_000, RetryClass::QuotaExhausted));
        let fresh = key("n", None);
        t.note_now(fresh.clone(), 1_000, RetryClass::RateLimited, 1_000);
        assert_eq!(t.check_now(&fresh, 999), None);
    }

    #[test]
    fn list_shows_what_is_in_force_soonest_first_and_clear_ends_one() {
        let t = Cooldowns::default();
        t.note_now(key("late", Some(SECRET)), 9_000, RetryClass::RateLimited, 0);
        t.note_now(
            key("soon", Some(SECRET)),
            4_000,
            RetryClass::QuotaExhausted,
            0,
        );
        t.note_now(key("gone", Some(SECRET)), 2_000, RetryClass::Overloaded, 0);
        let listed = t.list_now(3_000);
        assert_eq!(
            listed
                .iter()
                .map(|c| (c.until, c.reason.clone()))
                .collect::<Vec<_>>(),
            vec![
                (4_000, RetryClass::QuotaExhausted),
                (9_000, RetryClass::RateLimited)
            ]
        );
        assert!(listed.iter().all(|c| !c.key.contains(SECRET)));
        let shown = key("late", Some(SECRET)).shown();
        assert_eq!(t.clear_now(&shown, 3_000).map(|c| c.until), Some(9_000));
        assert_eq!(t.clear_now(&shown, 3_000), None, "already cleared");
        assert_eq!(t.check_now(&key("late", Some(SECRET)), 3_000), None);
        let gone = key("gone", Some(SECRET)).shown();
        assert_eq!(t.clear_now(&gone, 3_000), None, "expired is unknown");
    }

    #[test]
    fn advised_waits_on_throttling_and_quota_answers_start_cooldowns() {
        let wait = Some(RetryAfter::Delay(Duration::from_secs(3000)));
        assert_eq!(
            advised(&answer(429, "", wait), 1_000),
            Some((3_001_000, RetryClass::RateLimited))
        );
        assert_eq!(
            advised(&answer(529, "overloaded_error", wait), 1_000),
            Some((3_001_000, RetryClass::Overloaded))
        );
        assert_eq!(
            advised(&answer(429, "insufficient_quota", wait), 1_000),
            Some((3_001_000, RetryClass::QuotaExhausted)),
            "quota is kept apart from throttling"
        );
        assert_eq!(
            advised(&answer(503, "", Some(RetryAfter::At(7_000))), 1_000),
            Some((7_000, RetryClass::Overloaded))
        );
        // No advice, advice in the past, or a class that is not about waiting: none.
        assert_eq!(advised(&answer(429, "", None), 1_000), None);
        assert_eq!(
            advised(&answer(429, "", Some(RetryAfter::At(500))), 1_000),
            None
        );
        assert_eq!(advised(&answer(500, "", wait), 1_000), None);
        assert_eq!(advised(&answer(400, "", wait), 1_000), None);
        let refusal = Wait {
            until: 9_000,
            reason: RetryClass::RateLimited,
        }
        .refusal();
        assert_eq!(advised(&refusal, 1_000), None);
    }
}
