//! Tier 1's policy, pure: after a failed opening of a provider call, wait how long (full
//! jitter of `min(cap, base·2^k)`, or exactly the provider's advised wait) or give up.
//! The clock and the random source are passed in.
use super::classify;
use crate::llm::{ProviderError, RetryAfter};
use rand::Rng;
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    pub max_attempts: u32,
    pub base: Duration,
    /// Also Tier 1's window: an advised wait longer than what is left of it ends the run.
    pub cap: Duration,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Try again after this wait (no request before it).
    RetryIn(Duration),
    /// End the run now; the failure's classification carries any advised wait.
    GiveUp,
}

impl Policy {
    /// Whether Tier 1 may retry this failure of the opening (before any delta).
    pub fn retries(err: &ProviderError) -> bool {
        if let ProviderError::Status {
            should_retry: Some(advice),
            ..
        } = err
        {
            return *advice;
        }
        classify::classify(err, false, 0).retryable
    }

    /// The full-jitter backoff before attempt `n + 1` after `n` failed attempts (`n >= 1`).
    pub fn backoff(&self, n: u32, rng: &mut impl Rng) -> Duration {
        let exp = self
            .base
            .saturating_mul(2u32.saturating_pow(n.saturating_sub(1)));
        let ceiling = exp.min(self.cap).as_millis() as u64;
        Duration::from_millis(rng.random_range(0..=ceiling))
    }

    /// After attempt `n` (1-based) failed with `err`, `elapsed` into the window, at `now_ms`.
    pub fn after_failure(
        &self,
        n: u32,
        err: &ProviderError,
        elapsed: Duration,
        now_ms: i64,
        rng: &mut impl Rng,
    ) -> Decision {
        if n >= self.max_attempts || !Self::retries(err) {
            return Decision::GiveUp;
        }
        if let Some(wait) = advised_wait(err, now_ms) {
            let left = self.cap.saturating_sub(elapsed);
            return if wait > left {
                Decision::GiveUp
            } else {
                Decision::RetryIn(wait)
            };
        }
        Decision::RetryIn(self.backoff(n, rng))
    }
}

/// How long the provider said to wait: its advice on this answer, or what is left of the
/// cooldown that kept the request from being sent (treated as the same advice).
fn advised_wait(err: &ProviderError, now_ms: i64) -> Option<Duration> {
    let until = match err {
        ProviderError::Status {
            retry_after: Some(RetryAfter::Pinned { wait, .. }),
            ..
        } => return Some(*wait),
        ProviderError::Status {
            retry_after: Some(advice),
            ..
        } => classify::until(*advice, now_ms),
        ProviderError::CoolingDown { until, .. } => *until,
        _ => return None,
    };
    Some(Duration::from_millis(
        u64::try_from(until.saturating_sub(now_ms)).unwrap_or(0),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use app::wire::RetryClass;
    use rand::SeedableRng;

    const POLICY: Policy = Policy {
        max_attempts: 3,
        base: Duration::from_millis(1000),
        cap: Duration::from_millis(30_000),
    };

    fn status(code: u16, retry_after: Option<RetryAfter>) -> ProviderError {
        ProviderError::Status {
            status: code,
            error_type: None,
            error_code: None,
            message: "x".into(),
            retry_after,
            should_retry: None,
        }
    }

    #[test]
    fn backoff_stays_within_full_jitter_bounds_over_many_seeds() {
        for seed in 0..500 {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            for n in 1..=8 {
                let d = POLICY.backoff(n, &mut rng);
                let ceiling = (1000u64 << (n - 1)).min(30_000);
                assert!(d.as_millis() as u64 <= ceiling, "n={n} d={d:?}");
            }
        }
        // Jitter really spreads: not every draw is the ceiling or zero.
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let draws: Vec<_> = (0..50).map(|_| POLICY.backoff(3, &mut rng)).collect();
        assert!(draws.iter().any(|d| *d != draws[0]));
    }

    #[test]
    fn retries_transient_failures_until_attempts_run_out() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        for code in [429, 500, 502, 503, 504, 529] {
            let e = status(code, None);
            assert!(
                matches!(
                    POLICY.after_failure(1, &e, Duration::ZERO, 0, &mut rng),
                    Decision::RetryIn(_)
                ),
                "{code}"
            );
            assert!(
                matches!(
                    POLICY.after_failure(2, &e, Duration::ZERO, 0, &mut rng),
                    Decision::RetryIn(_)
                ),
                "{code}"
            );
            assert_eq!(
                POLICY.after_failure(3, &e, Duration::ZERO, 0, &mut rng),
                Decision::GiveUp,
                "{code}"
            );
        }
        let net = ProviderError::Transport {
            message: "reset".into(),
        };
        assert!(matches!(
            POLICY.after_failure(1, &net, Duration::ZERO, 0, &mut rng),
            Decision::RetryIn(_)
        ));
    }

    #[test]
    fn never_retries_permanent_failures() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        for code in [400, 401, 403, 404, 422] {
            assert_eq!(
                POLICY.after_failure(1, &status(code, None), Duration::ZERO, 0, &mut rng),
                Decision::GiveUp
            );
        }
        assert_eq!(
            POLICY.after_failure(
                1,
                &ProviderError::NoCredentials,
                Duration::ZERO,
                0,
                &mut rng
            ),
            Decision::GiveUp
        );
        let quota = ProviderError::Status {
            status: 429,
            error_type: Some("insufficient_quota".into()),
            error_code: None,
            message: "quota".into(),
            retry_after: None,
            should_retry: None,
        };
        assert_eq!(
            POLICY.after_failure(1, &quota, Duration::ZERO, 0, &mut rng),
            Decision::GiveUp
        );
    }

    #[test]
    fn x_should_retry_overrides_the_status() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let mut no = status(503, None);
        let mut yes = status(409, None);
        if let ProviderError::Status { should_retry, .. } = &mut no {
            *should_retry = Some(false);
        }
        if let ProviderError::Status { should_retry, .. } = &mut yes {
            *should_retry = Some(true);
        }
        assert_eq!(
            POLICY.after_failure(1, &no, Duration::ZERO, 0, &mut rng),
            Decision::GiveUp
        );
        assert!(matches!(
            POLICY.after_failure(1, &yes, Duration::ZERO, 0, &mut rng),
            Decision::RetryIn(_)
        ));
    }

    #[test]
    fn an_advised_wait_is_slept_exactly_or_hands_off() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let short = status(429, Some(RetryAfter::Delay(Duration::from_secs(2))));
        assert_eq!(
            POLICY.after_failure(1, &short, Duration::ZERO, 0, &mut rng),
            Decision::RetryIn(Duration::from_secs(2))
        );
        let at = status(503, Some(RetryAfter::At(10_000 + 5_000)));
        assert_eq!(
            POLICY.after_failure(1, &at, Duration::ZERO, 10_000, &mut rng),
            Decision::RetryIn(Duration::from_secs(5))
        );
        // Longer than the window: give up at once (no sleep, no further request).
        let long = status(429, Some(RetryAfter::Delay(Duration::from_secs(3000))));
        assert_eq!(
            POLICY.after_failure(1, &long, Duration::ZERO, 0, &mut rng),
            Decision::GiveUp
        );
        // Longer than what is left of the window.
        let ten = status(429, Some(RetryAfter::Delay(Duration::from_secs(10))));
        assert_eq!(
            POLICY.after_failure(2, &ten, Duration::from_secs(25), 0, &mut rng),
            Decision::GiveUp
        );
        // A wait pinned to a cooldown's deadline is still slept exactly.
        let pinned = status(
            429,
            Some(RetryAfter::Pinned {
                wait: Duration::from_secs(2),
                until: 2_000,
            }),
        );
        assert_eq!(
            POLICY.after_failure(1, &pinned, Duration::ZERO, 5, &mut rng),
            Decision::RetryIn(Duration::from_secs(2))
        );
        // A past date means "now".
        let past = status(503, Some(RetryAfter::At(0)));
        assert_eq!(
            POLICY.after_failure(1, &past, Duration::ZERO, 5_000, &mut rng),
            Decision::RetryIn(Duration::ZERO)
        );
    }

    #[test]
    fn a_cooldown_is_treated_like_the_advice_that_started_it() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let cooled = |class, until| ProviderError::CoolingDown { class, until };
        // Within the window: sleep until the deadline, then send.
        assert_eq!(
            POLICY.after_failure(
                1,
                &cooled(RetryClass::RateLimited, 12_000),
                Duration::ZERO,
                10_000,
                &mut rng
            ),
            Decision::RetryIn(Duration::from_secs(2))
        );
        // Beyond it: the run ends at once.
        assert_eq!(
            POLICY.after_failure(
                1,
                &cooled(RetryClass::RateLimited, 3_010_000),
                Duration::ZERO,
                10_000,
                &mut rng
            ),
            Decision::GiveUp
        );
        // A quota cooldown is never waited out in-run.
        assert_eq!(
            POLICY.after_failure(
                1,
                &cooled(RetryClass::QuotaExhausted, 12_000),
                Duration::ZERO,
                10_000,
                &mut rng
            ),
            Decision::GiveUp
        );
    }
}
