//! Tier 2, the browser's visible retry, as a pure state machine: a failed run whose
//! classification is retryable arms a countdown (base ×2 up to the cap, unlimited) or a
//! scheduled retry at the provider's `retry_after_until`; when it fires, it dispatches a
//! Regenerate carrying `if_last_run`. Every arm bumps a generation token so stale timers and
//! answers change nothing. The operator's cancel is recorded on the server (`dismiss-retry`),
//! so a dismissed failure never arms again, in any tab or after a reload; a restored failure
//! counts down from its `finished_at` and its attempt number, not from the reload. No clock,
//! no timers, no I/O: the adapter feeds it inputs and carries out the effects it returns.
use crate::wire::{Backoff, ErrorCode, Millis, RetryClassification, Run, RunStatus};

/// The longest wait one browser timer takes (`setTimeout` holds an i32 of ms, ~24.8 days): a
/// later deadline is reached by chaining timers, each re-armed on [`Input::TimerFired`].
pub const MAX_TIMER_MS: u64 = i32::MAX as u64;

/// How long the one timer for `at` should wait from `now`: never negative, never over
/// [`MAX_TIMER_MS`].
pub fn timer_wait(at: Millis, now: Millis) -> u64 {
    u64::try_from(at.saturating_sub(now))
        .unwrap_or(0)
        .min(MAX_TIMER_MS)
}

/// How many times in a row the session's last turn failed: the trailing failed runs (prompts
/// held behind a failure left out). After a reload this is the countdown's attempt number.
pub fn failed_streak(runs: &[Run]) -> u32 {
    let streak = runs
        .iter()
        .rev()
        .filter(|r| r.held_by.is_none())
        .take_while(|r| r.status == RunStatus::Failed)
        .count();
    u32::try_from(streak).unwrap_or(u32::MAX)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArmKind {
    /// A ticking countdown.
    Countdown,
    /// "Retry after HH:MM": the provider asked to wait.
    Scheduled,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum State {
    Idle,
    Armed {
        generation: u64,
        attempt: u32,
        fires_at: Millis,
        kind: ArmKind,
    },
    Dispatching {
        generation: u64,
        attempt: u32,
    },
    Cancelled,
}

/// The failed run Tier 2 retries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub run_id: String,
    /// The operator message to regenerate from.
    pub anchor_id: String,
    pub retry: Option<RetryClassification>,
    pub finished_at: Millis,
    /// The operator cancelled Tier 2 for this run (`retry_dismissed_at` is set).
    pub dismissed: bool,
    /// How many times in a row this turn has failed, this run included ([`failed_streak`]).
    pub streak: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// The regenerate was accepted: this run now carries the turn.
    Receipt { run_id: String },
    /// The server refused with this code (`regenerate.stale`: someone else already retried).
    Refused { code: ErrorCode },
    /// The request did not get an answer.
    NetworkError,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    /// A run failed. `live`: seen as it happened (not restored from a snapshot after a reload).
    RunFailed {
        failure: Failure,
        live: bool,
        now: Millis,
    },
    /// A run of the session started or is queued (this tab's, another tab's, a CLI's).
    RunActive,
    RunCompleted,
    TimerFired {
        generation: u64,
        now: Millis,
    },
    DispatchAnswered {
        generation: u64,
        answer: Answer,
        now: Millis,
    },
    OperatorCancel,
    OperatorRetryNow {
        now: Millis,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// (Re)start the one timer to fire at `at` for this generation (ticks are the adapter's).
    StartTimer {
        generation: u64,
        at: Millis,
    },
    StopTimer,
    /// `POST …/messages/:anchor/regenerate {if_last_run}`.
    Dispatch {
        generation: u64,
        anchor_id: String,
        if_last_run: String,
    },
    /// Abort the in-flight regenerate request.
    AbortDispatch,
    /// The fallback: a receipt arrived after the operator cancelled; stop that run.
    CancelRun {
        run_id: String,
    },
    /// Record the operator's cancel on the failed run (`POST …/runs/:rid/dismiss-retry`), so
    /// other tabs disarm and no reload re-arms it.
    DismissRetry {
        run_id: String,
    },
}

#[derive(Clone, Debug)]
pub struct Tier2 {
    policy: Backoff,
    state: State,
    generation: u64,
    /// Retries armed since the last completed run.
    attempt: u32,
    failure: Option<Failure>,
    /// Failures already handled, so a replayed event never re-arms.
    seen_run: Option<String>,
    /// The generation whose dispatch the operator cancelled mid-flight.
    cancelled_dispatch: Option<u64>,
}

impl Tier2 {
    pub fn new(policy: Backoff) -> Self {
        Tier2 {
            policy,
            state: State::Idle,
            generation: 0,
            attempt: 0,
            failure: None,
            seen_run: None,
            cancelled_dispatch: None,
        }
    }

    pub fn state(&self) -> &State {
        &self.state
    }

    pub fn failure(&self) -> Option<&Failure> {
        self.failure.as_ref()
    }

    pub fn policy(&self) -> Backoff {
        self.policy
    }

    pub fn set_policy(&mut self, policy: Backoff) {
        self.policy = policy;
    }

    /// Whether a failure arms Tier 2: retryable, and (after a reload) recent or still waited on.
    pub fn arms_for(&self, failure: &Failure, live: bool, now: Millis) -> bool {
        let Some(retry) = &failure.retry else {
            return false;
        };
        if !retry.retryable || failure.dismissed {
            return false;
        }
        live || now - failure.finished_at < self.policy.cap_ms as Millis
            || retry.retry_after_until.is_some_and(|t| t > now)
    }

    pub fn step(&mut self, input: Input) -> Vec<Effect> {
        match input {
            Input::RunFailed { failure, live, now } => {
                if self.seen_run.as_deref() == Some(failure.run_id.as_str()) {
                    // The same failure again: news only if it was dismissed meanwhile.
                    return if failure.dismissed {
                        self.dismissed_elsewhere()
                    } else {
                        Vec::new()
                    };
                }
                self.seen_run = Some(failure.run_id.clone());
                let arms = self.arms_for(&failure, live, now);
                let dismissed =
                    failure.dismissed && failure.retry.as_ref().is_some_and(|r| r.retryable);
                let (streak, finished_at) = (failure.streak, failure.finished_at);
                self.failure = Some(failure);
                if dismissed {
                    let effects = self.go_idle();
                    self.state = State::Cancelled;
                    return effects;
                }
                if !arms {
                    self.attempt = 0;
                    return self.go_idle();
                }
                self.attempt = self.attempt.max(streak.saturating_sub(1));
                // Live: from now. Restored after a reload: from when it failed, so the
                // countdown resumes where it was instead of starting over.
                self.arm(if live { now } else { finished_at.min(now) })
            }
            Input::RunActive => match self.state {
                State::Armed { .. } => self.go_idle(),
                _ => Vec::new(),
            },
            Input::RunCompleted => {
                self.attempt = 0;
                self.failure = None;
                match self.state {
                    State::Armed { .. } | State::Cancelled => self.go_idle(),
                    _ => Vec::new(),
                }
            }
            Input::TimerFired { generation, now } => match self.state {
                // Early (a chained timer on the way to a far deadline): wait again.
                State::Armed {
                    generation: g,
                    fires_at,
                    ..
                } if g == generation && now < fires_at => vec![Effect::StartTimer {
                    generation,
                    at: fires_at,
                }],
                State::Armed {
                    generation: g,
                    attempt,
                    ..
                } if g == generation => self.dispatch(generation, attempt),
                _ => Vec::new(),
            },
            Input::DispatchAnswered {
                generation,
                answer,
                now,
            } => self.answered(generation, answer, now),
            Input::OperatorCancel => {
                let mut effects = self.stop();
                if effects.is_empty() {
                    return effects;
                }
                if let Some(f) = &self.failure {
                    effects.push(Effect::DismissRetry {
                        run_id: f.run_id.clone(),
                    });
                }
                effects
            }
            Input::OperatorRetryNow { .. } => match self.state {
                State::Armed { attempt, .. } => {
                    self.generation += 1;
                    let mut effects = vec![Effect::StopTimer];
                    effects.extend(self.dispatch(self.generation, attempt));
                    effects
                }
                State::Idle | State::Cancelled if self.failure.is_some() => {
                    self.attempt += 1;
                    self.generation += 1;
                    self.dispatch(self.generation, self.attempt)
                }
                _ => Vec::new(),
            },
        }
    }

    /// Stops an armed countdown or an in-flight dispatch: `Cancelled`. Nothing when neither.
    fn stop(&mut self) -> Vec<Effect> {
        let effects = match self.state {
            State::Armed { .. } => vec![Effect::StopTimer],
            State::Dispatching { generation, .. } => {
                self.cancelled_dispatch = Some(generation);
                vec![Effect::AbortDispatch]
            }
            _ => return Vec::new(),
        };
        self.state = State::Cancelled;
        effects
    }

    /// Another tab (or this one, echoed) dismissed the failure being retried: stop, as a
    /// cancel here would, without recording it again. A tab that was not counting down (an
    /// older failure) shows the cancel too, as a reload would.
    fn dismissed_elsewhere(&mut self) -> Vec<Effect> {
        let retryable = self.failure.as_mut().is_some_and(|f| {
            f.dismissed = true;
            f.retry.as_ref().is_some_and(|r| r.retryable)
        });
        if self.state == State::Idle && retryable {
            self.state = State::Cancelled;
            return Vec::new();
        }
        self.stop()
    }

    /// Arms the next attempt, counting down from `from`.
    fn arm(&mut self, from: Millis) -> Vec<Effect> {
        self.attempt += 1;
        self.generation += 1;
        let countdown = from.saturating_add(self.policy.delay_ms(self.attempt) as Millis);
        let after = self
            .failure
            .as_ref()
            .and_then(|f| f.retry.as_ref())
            .and_then(|r| r.retry_after_until);
        let (fires_at, kind) = match after {
            Some(t) if t > countdown => (t, ArmKind::Scheduled),
            _ => (countdown, ArmKind::Countdown),
        };
        self.state = State::Armed {
            generation: self.generation,
            attempt: self.attempt,
            fires_at,
            kind,
        };
        vec![Effect::StartTimer {
            generation: self.generation,
            at: fires_at,
        }]
    }

    fn dispatch(&mut self, generation: u64, attempt: u32) -> Vec<Effect> {
        let Some(f) = &self.failure else {
            return self.go_idle();
        };
        self.state = State::Dispatching {
            generation,
            attempt,
        };
        vec![Effect::Dispatch {
            generation,
            anchor_id: f.anchor_id.clone(),
            if_last_run: f.run_id.clone(),
        }]
    }

    fn answered(&mut self, generation: u64, answer: Answer, now: Millis) -> Vec<Effect> {
        if self.state == State::Cancelled && self.cancelled_dispatch == Some(generation) {
            self.cancelled_dispatch = None;
            return match answer {
                Answer::Receipt { run_id } => vec![Effect::CancelRun { run_id }],
                _ => Vec::new(),
            };
        }
        let State::Dispatching { generation: g, .. } = self.state else {
            return Vec::new();
        };
        if g != generation {
            return Vec::new();
        }
        match answer {
            // Follow the dispatched run (or, when stale, the one someone else started).
            Answer::Receipt { .. } | Answer::Refused { .. } => {
                self.state = State::Idle;
                Vec::new()
            }
            // No answer: count down again (the next delay is longer).
            Answer::NetworkError => self.arm(now),
        }
    }

    fn go_idle(&mut self) -> Vec<Effect> {
        let was_armed = matches!(self.state, State::Armed { .. });
        self.state = State::Idle;
        if was_armed {
            vec![Effect::StopTimer]
        } else {
            Vec::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::RetryClass;

    const P: Backoff = Backoff::CONTRACT;

    fn failure(run: &str, retryable: bool, after: Option<Millis>) -> Failure {
        Failure {
            run_id: run.into(),
            anchor_id: "m1".into(),
            retry: Some(RetryClassification {
                retryable,
                retry_class: RetryClass::Overloaded,
                retry_after_until: after,
            }),
            finished_at: 0,
            dismissed: false,
            streak: 1,
        }
    }

    fn failed(run: &str, now: Millis) -> Input {
        Input::RunFailed {
            failure: failure(run, true, None),
            live: true,
            now,
        }
    }

    #[test]
    fn delays_double_from_base_to_cap() {
        let d: Vec<u64> = (1..=10).map(|a| P.delay_ms(a)).collect();
        assert_eq!(
            d,
            vec![2000, 4000, 8000, 16000, 32000, 64000, 128000, 256000, 300000, 300000]
        );
        assert_eq!(P.delay_ms(10_000), 300_000);
    }

    #[test]
    fn a_retryable_failure_arms_fires_and_dispatches_with_if_last_run() {
        let mut t = Tier2::new(P);
        assert_eq!(
            t.step(failed("r1", 1000)),
            vec![Effect::StartTimer {
                generation: 1,
                at: 3000
            }]
        );
        assert!(matches!(
            t.state(),
            State::Armed {
                kind: ArmKind::Countdown,
                attempt: 1,
                ..
            }
        ));
        let e = t.step(Input::TimerFired {
            generation: 1,
            now: 3000,
        });
        assert_eq!(
            e,
            vec![Effect::Dispatch {
                generation: 1,
                anchor_id: "m1".into(),
                if_last_run: "r1".into()
            }]
        );
        t.step(Input::DispatchAnswered {
            generation: 1,
            answer: Answer::Receipt {
                run_id: "r2".into(),
            },
            now: 0,
        });
        assert_eq!(t.state(), &State::Idle);
        // That run fails too: the next countdown is twice as long.
        assert_eq!(
            t.step(failed("r2", 10_000)),
            vec![Effect::StartTimer {
                generation: 2,
                at: 14_000
            }]
        );
    }

    #[test]
    fn never_arms_for_permanent_failures_or_replays() {
        let mut t = Tier2::new(P);
        for class in [
            RetryClass::ContextOverflow,
            RetryClass::AuthFailed,
            RetryClass::QuotaExhausted,
        ] {
            let mut f = failure(class.as_str(), false, None);
            f.retry.as_mut().unwrap().retry_class = class;
            assert_eq!(
                t.step(Input::RunFailed {
                    failure: f,
                    live: true,
                    now: 0
                }),
                vec![]
            );
            assert_eq!(t.state(), &State::Idle);
        }
        let mut none = failure("rc", true, None);
        none.retry = None;
        assert_eq!(
            t.step(Input::RunFailed {
                failure: none,
                live: true,
                now: 0
            }),
            vec![],
            "cancelled runs carry no class"
        );
        t.step(failed("r9", 0));
        t.step(Input::OperatorCancel);
        assert_eq!(
            t.step(failed("r9", 5)),
            vec![],
            "a replayed failure does not re-arm"
        );
    }

    #[test]
    fn a_far_retry_after_schedules_instead_of_counting_down() {
        let mut t = Tier2::new(P);
        let f = failure("r1", true, Some(3_000_000));
        assert_eq!(
            t.step(Input::RunFailed {
                failure: f,
                live: true,
                now: 0
            }),
            vec![Effect::StartTimer {
                generation: 1,
                at: 3_000_000
            }]
        );
        assert!(matches!(
            t.state(),
            State::Armed {
                kind: ArmKind::Scheduled,
                ..
            }
        ));
        // A retry_after_until sooner than the countdown changes nothing.
        let mut t = Tier2::new(P);
        let f = failure("r1", true, Some(500));
        t.step(Input::RunFailed {
            failure: f,
            live: true,
            now: 0,
        });
        assert!(matches!(
            t.state(),
            State::Armed {
                kind: ArmKind::Countdown,
                fires_at: 2000,
                ..
            }
        ));
    }

    #[test]
    fn after_a_reload_only_recent_or_waited_on_failures_arm() {
        let t = Tier2::new(P);
        let old = failure("r1", true, None);
        assert!(!t.arms_for(&old, false, 400_000));
        assert!(t.arms_for(&old, false, 100_000));
        assert!(t.arms_for(&failure("r1", true, Some(500_000)), false, 400_000));
        assert!(t.arms_for(&old, true, 400_000));
    }

    #[test]
    fn cancel_while_dispatching_aborts_and_a_late_receipt_is_cancelled() {
        let mut t = Tier2::new(P);
        t.step(failed("r1", 0));
        t.step(Input::TimerFired {
            generation: 1,
            now: 2000,
        });
        assert_eq!(
            t.step(Input::OperatorCancel),
            vec![
                Effect::AbortDispatch,
                Effect::DismissRetry {
                    run_id: "r1".into()
                }
            ]
        );
        assert_eq!(t.state(), &State::Cancelled);
        let e = t.step(Input::DispatchAnswered {
            generation: 1,
            answer: Answer::Receipt {
                run_id: "r2".into(),
            },
            now: 0,
        });
        assert_eq!(
            e,
            vec![Effect::CancelRun {
                run_id: "r2".into()
            }]
        );
    }

    #[test]
    fn stale_timers_and_answers_change_nothing() {
        let mut t = Tier2::new(P);
        t.step(failed("r1", 0));
        t.step(Input::OperatorRetryNow { now: 10 });
        assert!(matches!(
            t.state(),
            State::Dispatching { generation: 2, .. }
        ));
        assert_eq!(
            t.step(Input::TimerFired {
                generation: 1,
                now: 2000
            }),
            vec![]
        );
        assert_eq!(
            t.step(Input::DispatchAnswered {
                generation: 1,
                answer: Answer::NetworkError,
                now: 0
            }),
            vec![]
        );
        assert!(matches!(
            t.state(),
            State::Dispatching { generation: 2, .. }
        ));
    }

    #[test]
    fn another_tab_or_client_retrying_disarms_this_one() {
        let mut t = Tier2::new(P);
        t.step(failed("r1", 0));
        assert_eq!(t.step(Input::RunActive), vec![Effect::StopTimer]);
        assert_eq!(t.state(), &State::Idle);
    }

    #[test]
    fn cancel_is_recorded_on_the_server_and_a_dismissed_failure_never_arms() {
        let mut t = Tier2::new(P);
        t.step(failed("r1", 0));
        assert_eq!(
            t.step(Input::OperatorCancel),
            vec![
                Effect::StopTimer,
                Effect::DismissRetry {
                    run_id: "r1".into()
                }
            ]
        );
        // After a reload (or in another browser) the dismissed failure shows as cancelled.
        let mut t = Tier2::new(P);
        let mut f = failure("r1", true, None);
        f.dismissed = true;
        f.finished_at = 1000;
        assert_eq!(
            t.step(Input::RunFailed {
                failure: f.clone(),
                live: false,
                now: 2000
            }),
            vec![]
        );
        assert_eq!(t.state(), &State::Cancelled);
        assert!(!t.arms_for(&f, true, 2000));
        // Retry now still works from there.
        assert!(matches!(
            &t.step(Input::OperatorRetryNow { now: 3000 })[..],
            [Effect::Dispatch { if_last_run, .. }] if if_last_run == "r1"
        ));
    }

    #[test]
    fn a_dismissal_reaching_an_idle_tab_shows_it_cancelled() {
        let mut t = Tier2::new(P);
        let mut f = failure("r1", true, None);
        f.finished_at = 0;
        // Restored long after the cap: not armed.
        let old = |f: &Failure| Input::RunFailed {
            failure: f.clone(),
            live: false,
            now: 10_000_000,
        };
        assert_eq!(t.step(old(&f)), vec![]);
        assert_eq!(t.state(), &State::Idle);
        f.dismissed = true;
        assert_eq!(t.step(old(&f)), vec![]);
        assert_eq!(t.state(), &State::Cancelled);
    }

    #[test]
    fn a_dismissal_from_another_tab_disarms_this_one_without_recording_it_again() {
        let mut t = Tier2::new(P);
        t.step(failed("r1", 0));
        let mut f = failure("r1", true, None);
        f.dismissed = true;
        assert_eq!(
            t.step(Input::RunFailed {
                failure: f.clone(),
                live: true,
                now: 500
            }),
            vec![Effect::StopTimer]
        );
        assert_eq!(t.state(), &State::Cancelled);
        assert_eq!(
            t.step(Input::TimerFired {
                generation: 1,
                now: 2000
            }),
            vec![],
            "the old timer changes nothing"
        );
        // Mid-dispatch: the request is aborted (a late receipt's run is cancelled).
        let mut t = Tier2::new(P);
        t.step(failed("r1", 0));
        t.step(Input::TimerFired {
            generation: 1,
            now: 2000,
        });
        assert_eq!(
            t.step(Input::RunFailed {
                failure: f,
                live: true,
                now: 2100
            }),
            vec![Effect::AbortDispatch]
        );
        assert_eq!(t.state(), &State::Cancelled);
    }

    #[test]
    fn a_reload_resumes_the_countdown_from_the_failure_and_its_attempt() {
        let mut t = Tier2::new(P);
        let mut f = failure("r3", true, None);
        f.finished_at = 10_000;
        f.streak = 3;
        assert_eq!(
            t.step(Input::RunFailed {
                failure: f,
                live: false,
                now: 13_000
            }),
            vec![Effect::StartTimer {
                generation: 1,
                at: 18_000
            }],
            "attempt 3 waits 8 s from when it failed: 5 s are left"
        );
        assert!(matches!(t.state(), State::Armed { attempt: 3, .. }));
        // Past its time already: it fires at once.
        let mut t = Tier2::new(P);
        let mut f = failure("r1", true, None);
        f.finished_at = 10_000;
        t.step(Input::RunFailed {
            failure: f,
            live: false,
            now: 20_000,
        });
        assert_eq!(timer_wait(12_000, 20_000), 0);
        assert!(matches!(
            t.step(Input::TimerFired {
                generation: 1,
                now: 20_000
            })[..],
            [Effect::Dispatch { .. }]
        ));
    }

    #[test]
    fn a_deadline_beyond_one_browser_timer_is_reached_by_chained_timers() {
        const DAY: Millis = 86_400_000;
        let mut t = Tier2::new(P);
        let far = 40 * DAY;
        t.step(Input::RunFailed {
            failure: failure("r1", true, Some(far)),
            live: true,
            now: 0,
        });
        let first = timer_wait(far, 0);
        assert_eq!(first, MAX_TIMER_MS, "one timer waits at most 2^31-1 ms");
        let mut now = first as Millis;
        let mut hops = 0;
        while now < far {
            assert_eq!(
                t.step(Input::TimerFired { generation: 1, now }),
                vec![Effect::StartTimer {
                    generation: 1,
                    at: far
                }],
                "early: re-armed, not dispatched"
            );
            now += timer_wait(far, now) as Millis;
            hops += 1;
        }
        assert_eq!(hops, 1);
        assert!(matches!(
            t.step(Input::TimerFired { generation: 1, now })[..],
            [Effect::Dispatch { .. }]
        ));
    }

    fn run(id: &str, status: RunStatus, held: bool) -> Run {
        Run {
            id: id.into(),
            session_id: "s".into(),
            anchor_message_id: "m".into(),
            reply_message_id: None,
            status,
            kind: crate::wire::RunKind::Prompt,
            attempt: 1,
            tier1_attempts: 1,
            held_by: held.then(|| "x".into()),
            error_message: None,
            retry: None,
            retry_dismissed_at: None,
            created_at: 0,
            provenance: None,
            started_at: None,
            finished_at: None,
            steps: 0,
            tools_executed: 0,
        }
    }

    #[test]
    fn the_streak_counts_the_trailing_failed_turns() {
        use RunStatus::*;
        let runs = [
            run("a", Failed, false),
            run("b", Completed, false),
            run("c", Failed, false),
            run("d", Failed, false),
            run("e", Queued, true),
        ];
        assert_eq!(failed_streak(&runs), 2);
        assert_eq!(failed_streak(&runs[..2]), 0);
        assert_eq!(failed_streak(&[]), 0);
    }

    /// A tiny deterministic generator for the property test (no extra crates).
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self, n: u64) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.0 >> 33) % n
        }
    }

    #[test]
    fn property_no_doubled_dispatch_nothing_after_cancel_delays_in_bounds() {
        for seed in 0..300 {
            let mut rng = Lcg(seed);
            let mut t = Tier2::new(P);
            let mut now: Millis = 0;
            let mut dispatched = std::collections::HashSet::new();
            let mut cancelled = false;
            let mut run_no = 0;
            for _ in 0..200 {
                now += rng.next(5000) as Millis;
                let gen = t.generation.saturating_sub(rng.next(2));
                let input = match rng.next(8) {
                    0 => {
                        run_no += 1;
                        let after = (rng.next(3) == 0).then(|| now + rng.next(1_000_000) as Millis);
                        let mut f = failure(&format!("r{run_no}"), rng.next(4) != 0, after);
                        f.finished_at = now;
                        f.dismissed = rng.next(5) == 0;
                        Input::RunFailed {
                            failure: f,
                            live: rng.next(2) == 0,
                            now,
                        }
                    }
                    1 => Input::RunActive,
                    2 => Input::RunCompleted,
                    3 | 4 => Input::TimerFired {
                        generation: gen,
                        now,
                    },
                    5 => Input::DispatchAnswered {
                        generation: gen,
                        answer: match rng.next(3) {
                            0 => Answer::Receipt {
                                run_id: format!("x{gen}"),
                            },
                            1 => Answer::Refused {
                                code: ErrorCode::RegenerateStale,
                            },
                            _ => Answer::NetworkError,
                        },
                        now,
                    },
                    6 => Input::OperatorCancel,
                    _ => Input::OperatorRetryNow { now },
                };
                let new_failure = matches!(input, Input::RunFailed { .. });
                let operator_retry = matches!(input, Input::OperatorRetryNow { .. });
                if new_failure || operator_retry {
                    cancelled = false;
                }
                let is_cancel = matches!(input, Input::OperatorCancel);
                // A re-arm after an early timer keeps its deadline: less than a full delay left.
                let rearm = matches!(input, Input::TimerFired { .. });
                for effect in t.step(input) {
                    match effect {
                        Effect::Dispatch { generation, .. } => {
                            assert!(
                                dispatched.insert(generation),
                                "seed {seed}: generation {generation} dispatched twice"
                            );
                            assert!(!cancelled, "seed {seed}: dispatched after a cancel");
                        }
                        Effect::StartTimer { at, .. } => {
                            if let State::Armed {
                                kind: ArmKind::Countdown,
                                ..
                            } = t.state()
                            {
                                let d = (at - now) as u64;
                                let min = if rearm { 1 } else { P.base_ms };
                                assert!((min..=P.cap_ms).contains(&d), "seed {seed}: delay {d}");
                            }
                        }
                        _ => {}
                    }
                }
                if is_cancel && t.state() == &State::Cancelled {
                    cancelled = true;
                }
            }
        }
    }
}
