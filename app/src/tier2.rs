//! Tier 2, the browser's visible retry, as a pure state machine: a failed run whose
//! classification is retryable arms a countdown (base ×2 up to the cap, unlimited) or a
//! scheduled retry at the provider's `retry_after_until`; when it fires, it dispatches a
//! Regenerate carrying `if_last_run`. Every arm bumps a generation token so stale timers and
//! answers change nothing. The operator's cancel is recorded on the server (`dismiss-retry`),
//! so a dismissed failure never arms again, in any tab or after a reload; a restored failure
//! counts down from its `finished_at` and its attempt number, not from the reload. No clock,
//! no timers, no I/O: the adapter feeds it inputs and carries out the effects it returns.
use crate::wire::{
    Backoff, ErrorCode, MessageId, Millis, RetryClassification, Run, RunId, RunStatus,
};

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
    pub run_id: RunId,
    /// The operator message to regenerate from.
    pub anchor_id: MessageId,
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
    Receipt { run_id: RunId },
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
        anchor_id: MessageId,
        if_last_run: RunId,
    },
    /// Abort the in-flight regenerate request.
    AbortDispatch,
    /// The fallback: a receipt arrived after the operator cancelled; stop that run.
    CancelRun {
        run_id: RunId,
    },
    /// Record the operator's cancel on the failed run (`POST …/runs/:rid/dismiss-retry`), so
    /// other tabs disarm and no reload re-arms it.
    DismissRetry {
        run_id: RunId,
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
    seen_run: Option<RunId>,
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
                if self.seen_run.as_ref() == Some(&failure.run_id) {
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
mod tests;
