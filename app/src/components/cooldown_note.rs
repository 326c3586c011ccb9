//! The provider-wide cooldown behind the failed turn ("Provider cooling down until HH:MM" in
//! the retry banner), looked up on `GET /providers` when the turn failed with a class a
//! cooldown gives, and how to end it (`DELETE /providers/cooldowns`).
use super::state::Chat;
use crate::api;
use crate::client::fetch_json;
use crate::wire::{ClearCooldown, Cooldown, ProvidersResponse, RetryClass, RunStatus};
use leptos::prelude::*;

/// The classes of the answers that start a cooldown (and of the runs it fails).
const COOLDOWN_CLASSES: [RetryClass; 3] = [
    RetryClass::RateLimited,
    RetryClass::Overloaded,
    RetryClass::QuotaExhausted,
];

/// Whether `c` is the cooldown behind a failure of `class` (with its `retry_after_until`) of a
/// session on `model`: the same reason, and the same deadline or the same model.
pub fn behind(c: &Cooldown, class: &RetryClass, until: Option<i64>, model: &str) -> bool {
    c.reason == *class && (until == Some(c.until) || c.key.contains(&format!(" model={model} ")))
}

/// Follows the open session's failed turn; holds the cooldown behind it, if any.
pub fn watch(chat: Chat) -> RwSignal<Option<Cooldown>> {
    let found = RwSignal::new(None::<Cooldown>);
    let failure = Memo::new(move |_| {
        let retry = chat.runs.with(|rs| {
            rs.iter()
                .rev()
                .find(|r| r.held_by.is_none())
                .filter(|r| r.status == RunStatus::Failed)
                .and_then(|r| r.retry.clone())
        })?;
        if !COOLDOWN_CLASSES.contains(&retry.retry_class) {
            return None;
        }
        let model = chat
            .session()
            .with(|s| s.as_ref().map(|s| s.model.clone()))?;
        Some((retry.retry_class, retry.retry_after_until, model))
    });
    Effect::new(move |_| {
        found.set(None);
        let Some(wanted) = failure.get() else {
            return;
        };
        leptos::task::spawn_local(async move {
            let Ok(p) = fetch_json::<ProvidersResponse>(
                api::PROVIDERS.method(),
                &api::PROVIDERS.url(&[]),
                None,
            )
            .await
            else {
                return;
            };
            if failure.get_untracked().as_ref() != Some(&wanted) {
                return;
            }
            let (class, until, model) = &wanted;
            found.set(
                p.cooldowns
                    .into_iter()
                    .find(|c| behind(c, class, *until, model)),
            );
        });
    });
    found
}

/// Ends the cooldown `key` (`DELETE /providers/cooldowns`); on success the note goes.
pub fn clear(key: String, cooldown: RwSignal<Option<Cooldown>>, error: RwSignal<Option<String>>) {
    leptos::task::spawn_local(async move {
        let body = serde_json::to_string(&ClearCooldown { key }).unwrap_or_default();
        let url = api::CLEAR_COOLDOWN.url(&[]);
        let method = api::CLEAR_COOLDOWN.method();
        match fetch_json::<ProvidersResponse>(method, &url, Some(body)).await {
            Ok(_) => {
                cooldown.set(None);
                error.set(None);
            }
            Err(e) => error.set(Some(e.explain())),
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_matches_its_cooldown_by_reason_and_deadline_or_model() {
        let c = Cooldown {
            key: "openai https://x/v1 model=gpt-x key=sha256:ab12cd34ef56".into(),
            until: 9_000,
            reason: RetryClass::RateLimited,
        };
        let (rate, quota) = (&RetryClass::RateLimited, &RetryClass::QuotaExhausted);
        assert!(behind(&c, rate, Some(9_000), "other"));
        assert!(behind(&c, rate, None, "gpt-x"));
        assert!(!behind(&c, quota, Some(9_000), "gpt-x"));
        assert!(!behind(&c, rate, Some(8_000), "gpt"));
    }
}
