//! Background retry's schedule, pure: when a retryable failure in a `background` session
//! waits until — Tier 2's policy (one definition, `app::wire::Backoff`), or the provider's
//! `retry_after_until` when that is later.
use app::wire::Backoff;
use app::wire::{Millis, RetryClassification, WaitingRetry};

/// The waiting retry for a failure with classification `retry` at `now`, retry number
/// `attempt` (1-based); `None` when the failure is not retryable.
pub fn schedule(
    policy: Backoff,
    attempt: u32,
    retry: Option<&RetryClassification>,
    now: Millis,
) -> Option<WaitingRetry> {
    let retry = retry.filter(|r| r.retryable)?;
    let countdown = now + policy.delay_ms(attempt) as Millis;
    let fires_at = retry
        .retry_after_until
        .map_or(countdown, |until| until.max(countdown));
    Some(WaitingRetry {
        attempt,
        fires_at,
        reason: retry.retry_class.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retry::classify;
    use app::wire::RetryClass;

    const POLICY: Backoff = Backoff::CONTRACT;

    #[test]
    fn countdown_doubles_from_the_base_up_to_the_cap() {
        let c = classify::of(RetryClass::Overloaded, None);
        let at = |n| schedule(POLICY, n, Some(&c), 1_000).unwrap().fires_at - 1_000;
        assert_eq!(
            [at(1), at(2), at(3), at(8), at(9), at(40)],
            [2_000, 4_000, 8_000, 256_000, 300_000, 300_000]
        );
    }

    #[test]
    fn a_later_retry_after_wins_an_earlier_one_does_not() {
        let later = classify::of(RetryClass::RateLimited, Some(1_000 + 3_000_000));
        let w = schedule(POLICY, 1, Some(&later), 1_000).unwrap();
        assert_eq!(w.fires_at, 3_001_000);
        assert_eq!(w.reason, RetryClass::RateLimited);
        let sooner = classify::of(RetryClass::RateLimited, Some(1_500));
        assert_eq!(
            schedule(POLICY, 1, Some(&sooner), 1_000).unwrap().fires_at,
            3_000
        );
    }

    #[test]
    fn what_is_not_retryable_never_waits() {
        let auth = classify::of(RetryClass::AuthFailed, None);
        assert_eq!(schedule(POLICY, 1, Some(&auth), 0), None);
        assert_eq!(schedule(POLICY, 1, None, 0), None);
    }
}
