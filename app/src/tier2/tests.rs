//! The Tier 2 state machine's behaviour, without a browser.
use super::*;
use crate::wire::{RetryClass, SessionId};

const P: Backoff = Backoff::CONTRACT;

fn failure(run: &str, retryable: bool, after: Option<Millis>) -> Failure {
    Failure {
        run_id: RunId::new(run),
        anchor_id: MessageId::new("m1"),
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
            anchor_id: MessageId::new("m1"),
            if_last_run: RunId::new("r1")
        }]
    );
    t.step(Input::DispatchAnswered {
        generation: 1,
        answer: Answer::Receipt {
            run_id: RunId::new("r2"),
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
                run_id: RunId::new("r1")
            }
        ]
    );
    assert_eq!(t.state(), &State::Cancelled);
    let e = t.step(Input::DispatchAnswered {
        generation: 1,
        answer: Answer::Receipt {
            run_id: RunId::new("r2"),
        },
        now: 0,
    });
    assert_eq!(
        e,
        vec![Effect::CancelRun {
            run_id: RunId::new("r2")
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
                run_id: RunId::new("r1")
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
        [Effect::Dispatch { if_last_run, .. }] if if_last_run.as_str() == "r1"
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
        id: RunId::new(id),
        session_id: SessionId::new("s"),
        anchor_message_id: MessageId::new("m"),
        reply_message_id: None,
        status,
        kind: crate::wire::RunKind::Prompt,
        attempt: 1,
        tier1_attempts: 1,
        held_by: held.then(|| RunId::new("x")),
        error_message: None,
        retry: None,
        retry_dismissed_at: None,
        created_at: 0,
        provenance: None,
        started_at: None,
        finished_at: None,
        steps: 0,
        tools_executed: 0,
        served: Vec::new(),
        stop_reason: None,
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
                            run_id: RunId::new(format!("x{gen}")),
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
