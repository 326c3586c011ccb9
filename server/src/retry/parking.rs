//! Parking (CONTRACT §7), pure: while a model is out, the background retries waiting on it
//! do not fire one by one. One probe goes at the outage's next probe time; its success
//! releases the parked turns at a bounded rate, its failure moves the next probe on by the
//! backoff. This module says how an outage changes; the store keeps it (one row per model,
//! shared by every instance, so one probe serves the fleet).
use app::wire::{Backoff, Millis, RetryClass};

/// How long a claimed probe may go unlooked-at before another instance may probe again (its
/// instance may have died with it). At the deadline the probe's run is looked at: while it
/// still runs (a long tool turn; a dead instance's runs are ended by the lease takeover),
/// the deadline moves on by as much ([`Outage::probe_still_running`]).
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

/// One model's outage as kept. An outage is *open* until its probe (or a released turn)
/// succeeds; it is *over* once that happened and no turn is parked behind it any more (the
/// row may stay, so a released turn that fails still counts on it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outage {
    pub model: String,
    /// What the failure that opened it (or the latest probe's) was classified as.
    pub class: RetryClass,
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

    /// A background turn failed on the model with a class that parks. `failure.sent_by_release`:
    /// the turn was one the outage's release sent; `failure.parked`: how many other turns are
    /// parked behind the model now.
    pub fn failed(&self, outage: Option<Outage>, failure: Failure<'_>, now: Millis) -> Outage {
        let Failure {
            model,
            session,
            class,
            advised_until,
            sent_by_release,
            parked,
        } = failure;
        let opened = || Outage {
            model: model.to_string(),
            class: class.clone(),
            since: now,
            failures: 1,
            next_probe_at: self.next_probe(1, advised_until, now),
            probe_session: None,
            releasing: false,
            release_next: 0,
        };
        match outage {
            None => opened(),
            // The probe failed, or a turn the release sent did: the model is still out.
            Some(o)
                if o.probe_session.as_deref() == Some(session)
                    || (o.releasing && sent_by_release) =>
            {
                let failures = o.failures.saturating_add(1);
                Outage {
                    class: class.clone(),
                    failures,
                    next_probe_at: self.next_probe(failures, advised_until, now),
                    probe_session: None,
                    releasing: false,
                    ..o
                }
            }
            // The outage is over (its probe succeeded, every parked turn went): a new one.
            Some(o) if o.releasing && parked == 0 => opened(),
            // Released turns are still going out: this one parks and goes with them.
            Some(o) if o.releasing => o,
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

    /// A step of `session` is about to reach the model at `now` while its outage is open
    /// and due with nobody parked behind it: the step becomes its probe (the outage after),
    /// so the model is tested by one step, not by every turn at once. `None`: the outage does
    /// not let this step probe (not due, probed already, or its release is going).
    pub fn claim_for_step(&self, outage: &Outage, session: &str, now: Millis) -> Option<Outage> {
        if !outage.is_open() || outage.probe_session.is_some() || outage.next_probe_at > now {
            return None;
        }
        Some(Outage {
            probe_session: Some(session.to_string()),
            next_probe_at: now.saturating_add(PROBE_DEADLINE_MS),
            ..outage.clone()
        })
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

/// A background turn's failure on a model, as [`Parking::failed`] weighs it.
#[derive(Clone, Copy, Debug)]
pub struct Failure<'a> {
    pub model: &'a str,
    pub session: &'a str,
    pub class: &'a RetryClass,
    pub advised_until: Option<Millis>,
    /// The turn was sent by the outage's release (a parked turn fired while releasing).
    pub sent_by_release: bool,
    /// Turns parked behind the model now, this session's aside.
    pub parked: u32,
}

impl Outage {
    /// Whether the model is out: no probe or released turn has succeeded yet.
    pub fn is_open(&self) -> bool {
        !self.releasing
    }

    /// Whether the probe is past its deadline, so that its run should be looked at.
    pub fn probe_overdue(&self, now: Millis) -> bool {
        self.is_open() && self.probe_session.is_some() && self.next_probe_at <= now
    }

    /// The probe's run was found still running at `now`: it is not lost, its deadline moves
    /// on. (Any other outage is left as it is.)
    pub fn probe_still_running(self, now: Millis) -> Outage {
        if self.probe_overdue(now) {
            Outage {
                next_probe_at: now.saturating_add(PROBE_DEADLINE_MS),
                ..self
            }
        } else {
            self
        }
    }

    /// Whether a turn of `session` is kept from the model at `now`, with `waiting` turns
    /// parked behind it: the outage is open and someone waits for its probe (or the probe is
    /// in flight, within its deadline), and this turn is not the probe. An open outage nobody
    /// waits on any more (its turns were cancelled, its probe lost) keeps no one out.
    pub fn blocks(&self, session: &str, waiting: u32, now: Millis) -> bool {
        let probing = self.probe_session.is_some() && self.next_probe_at > now;
        self.is_open() && self.probe_session.as_deref() != Some(session) && (waiting > 0 || probing)
    }

    /// Whether the model rests at `now`: open, no probe in flight, its probe time not come.
    /// A step that has a fallback after the model passes it over meanwhile (a model that
    /// just failed a step is out for the next turn too), and once it is due the first such
    /// step probes it ([`Parking::claim_for_step`]). A step with no fallback tries it.
    pub fn resting(&self, now: Millis) -> bool {
        self.is_open() && self.probe_session.is_none() && self.next_probe_at > now
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

    const OVERLOADED: &RetryClass = &RetryClass::Overloaded;

    /// A failure of `session`'s turn, not sent by a release, with nothing else parked.
    fn of(session: &str, advised_until: Option<Millis>) -> Failure<'_> {
        Failure {
            model: "a/m",
            session,
            class: OVERLOADED,
            advised_until,
            sent_by_release: false,
            parked: 0,
        }
    }

    #[test]
    fn the_first_failure_opens_an_outage_and_later_ones_wait_behind_it() {
        let o = P.failed(None, of("s1", None), 1_000);
        assert_eq!((o.since, o.failures, o.next_probe_at), (1_000, 1, 3_000));
        let o = P.failed(Some(o), of("s2", None), 1_500);
        assert_eq!((o.failures, o.next_probe_at), (1, 3_000), "no probe moves");
        // A provider's advised wait past the backoff wins.
        let o = P.failed(Some(o), of("s3", Some(60_000)), 1_600);
        assert_eq!(o.next_probe_at, 60_000);
    }

    #[test]
    fn one_probe_then_the_others_wait_for_it() {
        let o = P.failed(None, of("s1", None), 0);
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
        let o = P.failed(None, of("s1", None), 0);
        let (_, o) = P.claim(&o, "s1", 2_000);
        let o = P.failed(Some(o), of("s1", None), 2_100);
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
        let sent = Failure {
            sent_by_release: true,
            parked: 3,
            ..of("s5", None)
        };
        let o = P.failed(Some(o), sent, 8_000);
        assert_eq!(
            (o.releasing, o.failures, o.next_probe_at),
            (false, 3, 16_000)
        );
    }

    /// Issue 35's first report: an outage whose probe succeeded and whose parked turns all
    /// went is over; the model's next failure opens a new one at the policy's first step.
    #[test]
    fn a_failure_after_the_release_opens_a_new_outage_at_the_first_step() {
        let o = P.failed(None, of("s1", None), 0);
        let (_, o) = P.claim(&o, "s1", 2_000);
        let o = P.failed(Some(o), of("s1", None), 2_100);
        let (_, o) = P.claim(&o, "s1", 6_100);
        let o = P.failed(Some(o), of("s1", None), 6_200);
        assert_eq!(o.failures, 3);
        let (_, o) = P.claim(&o, "s1", 14_200);
        let o = P.succeeded(o, "s1", 15_000);
        assert!(!o.is_open() && !o.blocks("s9", 5, 15_000));
        // Another session fails right after, nothing parked: a new outage, probe in 2 s.
        let o = P.failed(Some(o), of("s2", None), 16_000);
        assert_eq!(
            (o.since, o.failures, o.next_probe_at, o.releasing),
            (16_000, 1, 18_000, false)
        );
        assert!(o.is_open() && o.blocks("s3", 1, 16_500));
    }

    #[test]
    fn a_failure_while_turns_are_still_released_parks_it_with_them() {
        let o = P.failed(None, of("s1", None), 0);
        let (_, o) = P.claim(&o, "s1", 2_000);
        let o = P.succeeded(o, "s1", 2_500);
        let parked = Failure {
            parked: 4,
            ..of("s7", None)
        };
        let after = P.failed(Some(o.clone()), parked, 2_600);
        assert_eq!(
            after, o,
            "it waits for its release slot; the outage does not move"
        );
    }

    /// Issue 35, item 8: a probe that is a long tool turn is not taken for lost while its
    /// run still runs; a second probe goes only once it is gone.
    #[test]
    fn a_probe_still_running_at_its_deadline_keeps_the_others_waiting() {
        let o = P.failed(None, of("s1", None), 0);
        let (_, o) = P.claim(&o, "s1", 2_000);
        let deadline = 2_000 + PROBE_DEADLINE_MS;
        assert!(!o.probe_overdue(deadline - 1));
        assert!(o.probe_overdue(deadline));
        let o = o.probe_still_running(deadline);
        assert_eq!(
            P.claim(&o, "s2", deadline).0,
            Claim::Wait(deadline + PROBE_DEADLINE_MS)
        );
        assert!(o.blocks("s2", 0, deadline + 1));
        // Once it is gone (its run ended without a word), the next one probes.
        assert_eq!(
            P.claim(&o, "s2", deadline + PROBE_DEADLINE_MS).0,
            Claim::Probe
        );
    }

    #[test]
    fn only_the_probe_passes_an_open_outage() {
        let o = P.failed(None, of("s1", None), 0);
        assert!(o.blocks("s1", 1, 1_000), "no probe claimed yet");
        let (_, o) = P.claim(&o, "s1", 2_000);
        assert!(!o.blocks("s1", 0, 2_000), "the probe goes");
        assert!(o.blocks("s2", 0, 2_000), "the probe is in flight");
        // Its instance died with it and nobody else waits: nobody is kept out for good.
        assert!(!o.blocks("s2", 0, 2_000 + PROBE_DEADLINE_MS));
    }

    #[test]
    fn a_model_that_failed_a_step_rests_until_one_step_probes_it() {
        // A step gave up on the model (a fallback took it): nobody is parked, yet it rests
        // until its probe time.
        let o = P.failed(None, of("s1", None), 0);
        assert!(o.resting(1_999) && !o.blocks("s2", 0, 1_000));
        assert_eq!(P.claim_for_step(&o, "s2", 1_999), None, "not due yet");
        // Due: the first step to reach it probes; the others are kept out meanwhile.
        assert!(!o.resting(2_000));
        let probed = P.claim_for_step(&o, "s2", 2_000).expect("the step probes");
        assert_eq!(probed.probe_session.as_deref(), Some("s2"));
        assert!(!probed.blocks("s2", 0, 2_001) && probed.blocks("s3", 0, 2_001));
        assert_eq!(P.claim_for_step(&probed, "s3", 2_001), None, "one probe");
        // The probe fails: it rests again, for longer. It succeeds: over.
        let failed = P.failed(Some(probed.clone()), of("s2", None), 2_100);
        assert_eq!((failed.failures, failed.next_probe_at), (2, 6_100));
        assert!(failed.resting(6_000));
        let over = P.succeeded(probed, "s2", 2_100);
        assert!(!over.is_open() && !over.resting(2_101) && !over.blocks("s3", 0, 2_101));
    }
}
