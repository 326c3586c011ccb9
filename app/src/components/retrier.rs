//! The page's Tier 2 driver: feeds the pure [`Tier2`] machine and carries out its effects
//! with a browser timer and abortable regenerate, cancel and dismiss calls.
use crate::api;
use crate::client::{fetch_json, fetch_json_with, Abort, PageLocal};
use crate::clock::now_ms;
use crate::tier2::{self, Answer, Failure, Input, State, Tier2};
use crate::wire::Backoff;
use crate::wire::{ClientConfig, ErrorCode, MessageId, Receipt, Run, RunId, RunStatus, SessionId};
use leptos::prelude::*;
use std::time::Duration;

/// The page's Tier 2: the machine, its timer and its in-flight request.
#[derive(Clone, Copy)]
pub struct Retrier {
    machine: StoredValue<Tier2>,
    pub state: RwSignal<State>,
    pub failure: RwSignal<Option<Failure>>,
    timer: StoredValue<Option<TimeoutHandle>, PageLocal>,
    abort: StoredValue<Option<Abort>, PageLocal>,
    /// The regenerate in flight: its anchor and the failed run it retries.
    pending: StoredValue<Option<(MessageId, RunId)>>,
    session_id: StoredValue<Option<SessionId>>,
    pub error: RwSignal<Option<String>>,
    /// "Already retried in another tab": this tab's retry found the turn taken.
    pub stale: RwSignal<bool>,
}

impl Default for Retrier {
    fn default() -> Self {
        Self::new()
    }
}

impl Retrier {
    pub fn new() -> Self {
        // Until the server's `/config` says otherwise (`Retrier::configure`).
        let policy = Backoff::CONTRACT;
        Retrier {
            machine: StoredValue::new(Tier2::new(policy)),
            state: RwSignal::new(State::Idle),
            failure: RwSignal::new(None),
            timer: StoredValue::new_with_storage(None),
            abort: StoredValue::new_with_storage(None),
            pending: StoredValue::new(None),
            session_id: StoredValue::new(None),
            error: RwSignal::new(None),
            stale: RwSignal::new(false),
        }
    }

    /// Starts over for a session (after navigation), with the server's policy.
    pub fn reset(&self, session_id: &SessionId) {
        self.stop_timer();
        self.session_id.set_value(Some(session_id.clone()));
        let policy = self.machine.with_value(|m| m.policy());
        self.machine.set_value(Tier2::new(policy));
        self.sync();
    }

    /// Takes the server's Tier 2 schedule (`GET /config`, read once by the page).
    pub fn configure(&self, c: &ClientConfig) {
        let policy = Backoff {
            base_ms: c.tier2_base_ms,
            cap_ms: c.tier2_cap_ms,
        };
        self.machine.update_value(|m| m.set_policy(policy));
    }

    /// Tells the machine about a run's new state; `live` is false for a loaded snapshot;
    /// `streak`: how many times in a row the turn has failed ([`tier2::failed_streak`]).
    pub fn observe(&self, run: &Run, live: bool, streak: u32) {
        if run.held_by.is_some() {
            return;
        }
        let input = match run.status {
            RunStatus::Failed => Input::RunFailed {
                failure: Failure {
                    run_id: run.id.clone(),
                    anchor_id: run.anchor_message_id.clone(),
                    retry: run.retry.clone(),
                    finished_at: run.finished_at.unwrap_or(0),
                    dismissed: run.retry_dismissed_at.is_some(),
                    streak,
                },
                live,
                now: now_ms(),
            },
            // A run waiting for approval is not a failure: Tier 2 never arms on it.
            RunStatus::Queued | RunStatus::Running | RunStatus::AwaitingApproval => {
                Input::RunActive
            }
            RunStatus::Completed => Input::RunCompleted,
            RunStatus::Cancelled => return,
        };
        self.feed(input);
    }

    pub fn feed(&self, input: Input) {
        // "Already retried in another tab" lasts while this tab follows that run.
        if !matches!(
            input,
            Input::RunActive | Input::TimerFired { .. } | Input::DispatchAnswered { .. }
        ) {
            self.stale.set(false);
        }
        let effects = self
            .machine
            .try_update_value(|m| m.step(input))
            .unwrap_or_default();
        self.sync();
        for effect in effects {
            self.carry_out(effect);
        }
    }

    fn sync(&self) {
        self.machine.with_value(|m| {
            self.state.set(m.state().clone());
            self.failure.set(m.failure().cloned());
        });
    }

    fn stop_timer(&self) {
        if let Some(Some(h)) = self.timer.try_update_value(|t| t.take()) {
            h.clear();
        }
    }

    fn carry_out(&self, effect: tier2::Effect) {
        let this = *self;
        match effect {
            tier2::Effect::StartTimer { generation, at } => {
                self.stop_timer();
                // At most one browser timer's reach; an early fire re-arms (see `tier2`).
                let wait = Duration::from_millis(tier2::timer_wait(at, now_ms()));
                let fire = move || {
                    this.feed(Input::TimerFired {
                        generation,
                        now: now_ms(),
                    })
                };
                if let Ok(h) = set_timeout(fire, wait) {
                    self.timer.set_value(Some(h));
                }
            }
            tier2::Effect::StopTimer => self.stop_timer(),
            tier2::Effect::Dispatch {
                generation,
                anchor_id,
                if_last_run,
            } => {
                let Some(sid) = self.session_id.get_value() else {
                    return;
                };
                let abort = Abort::new();
                self.abort.set_value(abort.clone());
                self.pending
                    .set_value(Some((anchor_id.clone(), if_last_run.clone())));
                let url = api::REGENERATE.url(&[sid.as_str(), anchor_id.as_str()]);
                let body = serde_json::to_string(&crate::wire::Regenerate {
                    if_last_run: Some(if_last_run),
                    manual: false,
                    from: crate::client::tab_id(),
                })
                .ok();
                leptos::task::spawn_local(async move {
                    let res = fetch_json_with::<Receipt>("POST", &url, body, abort.as_ref()).await;
                    let answer = match res {
                        Ok(r) => Answer::Receipt { run_id: r.run_id },
                        Err(e) if e.status >= 400 => {
                            if e.code == ErrorCode::RegenerateStale {
                                this.stale.set(true);
                            } else {
                                this.error.set(Some(e.explain()));
                            }
                            Answer::Refused { code: e.code }
                        }
                        Err(_) => Answer::NetworkError,
                    };
                    this.feed(Input::DispatchAnswered {
                        generation,
                        answer,
                        now: now_ms(),
                    });
                });
            }
            tier2::Effect::AbortDispatch => {
                if let Some(Some(a)) = self.abort.try_update_value(|a| a.take()) {
                    a.abort();
                }
                // The server may have accepted the request before the abort: stop any run
                // that replaced the failed one (the fallback cancel).
                let Some(Some((anchor, failed))) = self.pending.try_update_value(|p| p.take())
                else {
                    return;
                };
                let Some(sid) = self.session_id.get_value() else {
                    return;
                };
                leptos::task::spawn_local(async move {
                    let url = api::SESSION.url(&[sid.as_str()]);
                    let method = api::SESSION.method();
                    let Ok(detail) =
                        fetch_json::<crate::wire::SessionDetail>(method, &url, None).await
                    else {
                        return;
                    };
                    let stray = detail
                        .runs
                        .iter()
                        .rev()
                        .find(|r| r.anchor_message_id == anchor)
                        .filter(|r| r.id != failed && r.status.is_active());
                    if let Some(run) = stray {
                        let url = api::CANCEL_RUN.url(&[sid.as_str(), run.id.as_str()]);
                        let method = api::CANCEL_RUN.method();
                        let _ = fetch_json::<Run>(method, &url, Some("{}".into())).await;
                    }
                });
            }
            tier2::Effect::DismissRetry { run_id } => {
                let Some(sid) = self.session_id.get_value() else {
                    return;
                };
                leptos::task::spawn_local(async move {
                    let url = api::DISMISS_RETRY.url(&[sid.as_str(), run_id.as_str()]);
                    let method = api::DISMISS_RETRY.method();
                    if let Err(e) = fetch_json::<Run>(method, &url, Some("{}".into())).await {
                        // A run that ended otherwise meanwhile (`conflict`) has nothing to keep.
                        if e.code != ErrorCode::Conflict {
                            this.error.set(Some(e.explain()));
                        }
                    }
                });
            }
            tier2::Effect::CancelRun { run_id } => {
                let Some(sid) = self.session_id.get_value() else {
                    return;
                };
                leptos::task::spawn_local(async move {
                    let url = api::CANCEL_RUN.url(&[sid.as_str(), run_id.as_str()]);
                    let method = api::CANCEL_RUN.method();
                    let _ = fetch_json::<Run>(method, &url, Some("{}".into())).await;
                });
            }
        }
    }
}
