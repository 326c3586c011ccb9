//! Parking (CONTRACT §7), pure: while a model is out, the background retries waiting on it
//! do not fire one by one. One probe goes at the outage's next probe time; its success
//! releases the parked turns at a bounded rate, its failure moves the next probe on by the
//! backoff. This module says how an outage changes; the store keeps it (one row per model,
//! shared by every instance, so one probe serves the fleet).
use app::wire::{Backoff, Millis, RetryClass};

/// How long a claimed probe may take before another instance may probe again (its instance
/// may have died with it).
pub const PROBE_DEADLINE_MS: Millis = 120_000;

/// Whether a failure of class `class` is the provider being unable to take turns now: it
/// falls back to the next model of a chain, and in a background session it parks the turn.
pub fn provider_unavailable(class: &RetryClass) -> bool {
    matches!(
        class,
        RetryClass::Overloaded
            | RetryClass::RateLimited
            | RetryClass::ServerError
            | RetryClass::Timeout
            | RetryClass::Network
    )
}

/// One model's outage as kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outage {
    pub model: String,
    pub since: Millis,
    /// Probes (and the first failure) that failed in a row.
    pub failures: u32,
    pub next_probe_at: Millis,
    /// The session whose retry is the probe in flight.
    pub probe_session: Option<String>,
    /// The probe succeeded: parked turns go, one per release interval.
    pub releasing: bool,
    /// When the next parked turn may go (releasing).
    pub release_next: Millis,
}

/// The parking policy: the probes' backoff and the release rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Parking {
    pub probe: Backoff,
    /// Parked turns released per second per model, fleet-wide.
    pub release_per_s: u32,
}

impl Parking {
    /// Between two released turns.
    pub fn release_interval(&self) -> Millis {
        1000 / Millis::from(self.release_per_s.max(1))
    }

    /// When to probe after `failures` failures in a row, at `now`: the backoff, or the
    /// provider's advised end when later.
    pub fn next_probe(&self, failures: u32, advised_until: Option<Millis>, now: Millis) -> Millis {
        let backoff = now
            .saturating_add(Millis::try_from(self.probe.delay_ms(failures)).unwrap_or(Millis::MAX));
        advised_until.map_or(backoff, |until| until.max(backoff))
    }

    /// A turn of `session` parked on the model failed with a class that parks.
    pub fn failed(
        &self,
        outage: Option<Outage>,
        model: &str,
        session: &str,
        advised_until: Option<Millis>,
        now: Millis,
    ) -> Outage {
        match outage {
            None => Outage {
                model: model.to_string(),
                since: now,
                failures: 1,
                next_probe_at: self.next_probe(1, advised_until, now),
                probe_session: None,
                releasing: false,
                release_next: 0,
            },
            // The probe failed, or a released turn did: the model is still out.
            Some(o) if o.releasing || o.probe_session.as_deref() == Some(session) => {
                let failures = o.failures.saturating_add(1);
                Outage {
                    failures,
                    next_probe_at: self.next_probe(failures, advised_until, now),
                    probe_session: None,
                    releasing: false,
                    ..o
                }
            }
            // One more turn parked behind the probe to come.
            Some(o) => Outage {
                next_probe_at: advised_until.map_or(o.next_probe_at, |u| u.max(o.next_probe_at)),
                ..o
            },
        }
    }

    /// A turn of `session` parked on the model completed: when it was the probe (or one of
    /// the released), the parked turns go.
    pub fn succeeded(&self, outage: Outage, session: &str, now: Millis) -> Outage {
        if outage.probe_session.as_deref() == Some(session) || outage.releasing {
            Outage {
                probe_session: None,
                releasing: true,
                release_next: outage.release_next.max(now),
                ..outage
            }
        } else {
            outage
        }
    }

    /// What the fire loop may do for the model's parked turns at `now`, and the outage after.
    pub fn claim(&self, outage: &Outage, session: &str, now: Millis) -> (Claim, Outage) {
        let mut next = outage.clone();
        if outage.releasing {
            if outage.release_next > now {
                return (Claim::Wait(outage.release_next), next);
            }
            next.release_next = outage
                .release_next
                .max(now)
                .saturating_add(self.release_interval());
            return (Claim::Release, next);
        }
        // A probe in flight holds the others until its deadline (then it counts as lost).
        if outage.next_probe_at > now {
            return (Claim::Wait(outage.next_probe_at), next);
        }
        next.probe_session = Some(session.to_string());
        next.next_probe_at = now.saturating_add(PROBE_DEADLINE_MS);
        (Claim::Probe, next)
    }
}

/// The fire loop's answer for one model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claim {
    /// Fire this turn as the probe.
    Probe,
    /// Fire this turn: the probe succeeded and its release slot came.
    Release,
    /// Nothing fires before this time.
    Wait(Millis),
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: Parking = Parking {
        probe: Backoff {
            base_ms: 2_000,
            cap_ms: 300_000,
        },
        release_per_s: 2,
    };

    #[test]
    fn the_first_failure_opens_an_outage_and_later_ones_wait_behind_it() {
        let o = P.failed(None, "a/m", "s1", None, 1_000);
        assert_eq!((o.since, o.failures, o.next_probe_at), (1_000, 1, 3_000));
        let o = P.failed(Some(o), "a/m", "s2", None, 1_500);
        assert_eq!((o.failures, o.next_probe_at), (1, 3_000), "no probe moves");
        // A provider's advised wait past the backoff wins.
        let o = P.failed(Some(o), "a/m", "s3", Some(60_000), 1_600);
        assert_eq!(o.next_probe_at, 60_000);
    }

    #[test]
    fn one_probe_then_the_others_wait_for_it() {
        let o = P.failed(None, "a/m", "s1", None, 0);
        assert_eq!(P.claim(&o, "s1", 1_000).0, Claim::Wait(2_000));
        let (claim, o) = P.claim(&o, "s1", 2_000);
        assert_eq!(claim, Claim::Probe);
        assert_eq!(o.probe_session.as_deref(), Some("s1"));
        // Another instance's look at the same moment finds the probe in flight.
        assert_eq!(
            P.claim(&o, "s2", 2_001).0,
            Claim::Wait(2_000 + PROBE_DEADLINE_MS)
        );
        // A lost probe (its instance died) is replaced after its deadline.
        assert_eq!(P.claim(&o, "s2", 2_000 + PROBE_DEADLINE_MS).0, Claim::Probe);
    }

    #[test]
    fn a_failed_probe_backs_off_a_successful_one_releases_at_the_rate() {
        let o = P.failed(None, "a/m", "s1", None, 0);
        let (_, o) = P.claim(&o, "s1", 2_000);
        let o = P.failed(Some(o), "a/m", "s1", None, 2_100);
        assert_eq!(
            (o.failures, o.next_probe_at, o.probe_session.clone()),
            (2, 6_100, None)
        );
        let (_, o) = P.claim(&o, "s2", 6_100);
        // Someone else's success before the probe ends releases nothing.
        assert!(!P.succeeded(o.clone(), "s9", 6_200).releasing);
        let o = P.succeeded(o, "s2", 6_500);
        assert!(o.releasing);
        let (c1, o) = P.claim(&o, "s3", 6_500);
        let (c2, o) = P.claim(&o, "s4", 6_600);
        let (c3, o) = P.claim(&o, "s4", 7_000);
        assert_eq!(
            (c1, c2, c3),
            (Claim::Release, Claim::Wait(7_000), Claim::Release)
        );
        // Twenty looks in one second release two turns.
        let mut o = o;
        let mut released = 0;
        for t in (7_500..8_500).step_by(50) {
            let (c, next) = P.claim(&o, "s", t);
            o = next;
            released += u32::from(c == Claim::Release);
        }
        assert_eq!(released, 2);
        // A released turn that fails again: the model is still out, probing backs off more.
        let o = P.failed(Some(o), "a/m", "s5", None, 8_000);
        assert_eq!(
            (o.releasing, o.failures, o.next_probe_at),
            (false, 3, 16_000)
        );
    }
}
