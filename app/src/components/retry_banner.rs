//! Tier 2 in the page: drives the pure [`Tier2`] machine with browser timers and an
//! abortable regenerate call, and shows its state — "Retrying in 8 s (attempt 3)",
//! "Retry after 14:32", or why a failure is not retried and what to do.
use super::chat::Chat;
use super::cooldown_note::{self, CooldownNote};
use super::hhmm;
use super::session_list::now_ms;
use crate::client::{api, fetch_json, fetch_json_with, Abort};
use crate::tier2::{self, Answer, ArmKind, Failure, Input, Policy, State, Tier2};
use crate::wire::{AutoRetry, ClientConfig, Receipt, RetryReceipt, Run, RunStatus, Session};
use leptos::prelude::*;
use std::time::Duration;

/// The page's Tier 2: the machine, its timer and its in-flight request.
#[derive(Clone, Copy)]
pub struct Retrier {
    machine: StoredValue<Tier2>,
    pub state: RwSignal<State>,
    pub failure: RwSignal<Option<Failure>>,
    timer: StoredValue<Option<TimeoutHandle>, LocalStorage>,
    abort: StoredValue<Option<Abort>, LocalStorage>,
    /// The regenerate in flight: its anchor and the failed run it retries.
    pending: StoredValue<Option<(String, String)>>,
    session_id: StoredValue<String>,
    pub error: RwSignal<Option<String>>,
}

impl Retrier {
    pub fn new() -> Self {
        let policy = Policy {
            base_ms: 2000,
            cap_ms: 300_000,
        };
        Retrier {
            machine: StoredValue::new(Tier2::new(policy)),
            state: RwSignal::new(State::Idle),
            failure: RwSignal::new(None),
            timer: StoredValue::new_local(None),
            abort: StoredValue::new_local(None),
            pending: StoredValue::new(None),
            session_id: StoredValue::new(String::new()),
            error: RwSignal::new(None),
        }
    }

    /// Starts over for a session (after navigation), with the server's policy.
    pub fn reset(&self, session_id: &str) {
        self.stop_timer();
        self.session_id.set_value(session_id.to_string());
        let policy = self.machine.with_value(|m| m.policy());
        self.machine.set_value(Tier2::new(policy));
        self.sync();
        let this = *self;
        leptos::task::spawn_local(async move {
            if let Ok(c) = fetch_json::<ClientConfig>("GET", &api("/config"), None).await {
                this.machine.update_value(|m| {
                    m.set_policy(Policy {
                        base_ms: c.tier2_base_ms,
                        cap_ms: c.tier2_cap_ms,
                    })
                });
            }
        });
    }

    /// Tells the machine about a run's new state; `live` is false for a loaded snapshot.
    pub fn observe(&self, run: &Run, live: bool) {
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
                },
                live,
                now: now_ms(),
            },
            RunStatus::Queued | RunStatus::Running => Input::RunActive,
            RunStatus::Completed => Input::RunCompleted,
            RunStatus::Cancelled => return,
        };
        self.feed(input);
    }

    pub fn feed(&self, input: Input) {
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
                let wait = Duration::from_millis((at - now_ms()).max(0) as u64);
                let fire = move || {
                    this.feed(Input::TimerFired {
                        generation,
                        now: now_ms(),
                    })
                };
                if let Ok(h) = set_timeout_with_handle(fire, wait) {
                    self.timer.set_value(Some(h));
                }
            }
            tier2::Effect::StopTimer => self.stop_timer(),
            tier2::Effect::Dispatch {
                generation,
                anchor_id,
                if_last_run,
            } => {
                let sid = self.session_id.get_value();
                let abort = Abort::new();
                self.abort.set_value(abort.clone());
                self.pending
                    .set_value(Some((anchor_id.clone(), if_last_run.clone())));
                let url = api(&format!("/sessions/{sid}/messages/{anchor_id}/regenerate"));
                let body = serde_json::to_string(&crate::wire::Regenerate {
                    if_last_run: Some(if_last_run),
                    manual: false,
                })
                .ok();
                leptos::task::spawn_local(async move {
                    let res = fetch_json_with::<Receipt>("POST", &url, body, abort.as_ref()).await;
                    let answer = match res {
                        Ok(r) => Answer::Receipt { run_id: r.run_id },
                        Err(e) if e.status >= 400 => {
                            if e.code != "regenerate.stale" {
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
                let sid = self.session_id.get_value();
                leptos::task::spawn_local(async move {
                    let url = api(&format!("/sessions/{sid}"));
                    let Ok(detail) =
                        fetch_json::<crate::wire::SessionDetail>("GET", &url, None).await
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
                        let url = api(&format!("/sessions/{sid}/runs/{}/cancel", run.id));
                        let _ = fetch_json::<Run>("POST", &url, Some("{}".into())).await;
                    }
                });
            }
            tier2::Effect::CancelRun { run_id } => {
                let sid = self.session_id.get_value();
                leptos::task::spawn_local(async move {
                    let url = api(&format!("/sessions/{sid}/runs/{run_id}/cancel"));
                    let _ = fetch_json::<Run>("POST", &url, Some("{}".into())).await;
                });
            }
        }
    }
}

/// What the operator can do about a failure that is not retried automatically.
fn advice(class: &str) -> &'static str {
    match class {
        "auth_failed" => "The provider rejected the API key: fix MULLIGAN_API_KEY and restart, then Regenerate.",
        "credentials_unresolved" => "No API key is configured: set MULLIGAN_API_KEY and restart, then Regenerate.",
        "spend_limit_exceeded" => "This session spent its token budget: raise MULLIGAN_SPEND_LIMIT_TOKENS or start a new session.",
        "quota_exhausted" => "The provider account is out of quota or credit: top it up, then Regenerate.",
        "context_overflow" => "The conversation no longer fits the model even after compaction: shorten the prompt or start a new session.",
        "invalid_request" => "The provider refused the request as invalid: edit the prompt and send it again.",
        _ => "Regenerate to try again.",
    }
}

/// The banner under a failed turn: countdown, scheduled retry, or why not and what to do.
#[component]
pub fn RetryBanner() -> impl IntoView {
    let chat = expect_context::<Chat>();
    let retrier = expect_context::<Retrier>();
    let cooldown = cooldown_note::watch(chat);
    // A clock that ticks only while a countdown shows: no work while idle.
    let now = RwSignal::new(now_ms());
    let ticker = StoredValue::new_local(None::<IntervalHandle>);
    let waiting = move || {
        chat.session
            .with(|s| s.as_ref().and_then(|s| s.waiting_retry.clone()))
    };
    Effect::new(move |_| {
        let armed = matches!(
            retrier.state.get(),
            State::Armed {
                kind: ArmKind::Countdown,
                ..
            }
        ) || waiting().is_some();
        if let Some(Some(h)) = ticker.try_update_value(|t| t.take()) {
            h.clear();
        }
        if armed {
            now.set(now_ms());
            if let Ok(h) =
                set_interval_with_handle(move || now.set(now_ms()), Duration::from_millis(250))
            {
                ticker.set_value(Some(h));
            }
        }
    });
    let failed_turn = move || {
        chat.runs.with(|rs| {
            rs.iter()
                .rev()
                .find(|r| r.held_by.is_none())
                .filter(|r| r.status == RunStatus::Failed)
                .cloned()
        })
    };
    let retry_now = move |_| retrier.feed(Input::OperatorRetryNow { now: now_ms() });
    let cancel = move |_| retrier.feed(Input::OperatorCancel);
    // A background session's retries belong to the server: these act on its waiting retry.
    let server_call = move |method: &'static str, path: &'static str| {
        let Some(sid) = chat.session_id() else { return };
        retrier.error.set(None);
        leptos::task::spawn_local(async move {
            let url = api(&format!("/sessions/{sid}/{path}"));
            let res = match method {
                "POST" => fetch_json::<RetryReceipt>("POST", &url, Some("{}".into()))
                    .await
                    .map(|_| ()),
                _ => fetch_json::<Session>(method, &url, None).await.map(|_| ()),
            };
            if let Err(e) = res {
                retrier.error.set(Some(e.explain()));
            }
        });
    };
    let background = move || {
        chat.session.with(|s| {
            s.as_ref()
                .is_some_and(|s| s.auto_retry == AutoRetry::Background)
        })
    };
    move || {
        // The failed turn, or (while a retry is on its way) the failure being retried.
        let retry = match failed_turn() {
            Some(run) => run.retry,
            None if matches!(retrier.state.get(), State::Dispatching { .. }) => {
                retrier.failure.get()?.retry
            }
            None => return None,
        };
        let class = retry
            .as_ref()
            .map(|r| r.retry_class.clone())
            .unwrap_or_default();
        let retryable = retry.as_ref().is_some_and(|r| r.retryable);
        let body = match (waiting(), retrier.state.get()) {
            (Some(w), _) => {
                let (fires_at, attempt) = (w.fires_at, w.attempt);
                let when = move || {
                    let left = fires_at - now.get();
                    if left > 120_000 {
                        format!("Retrying on the server at {} (attempt {attempt})", hhmm(fires_at))
                    } else {
                        format!("Retrying on the server in {} s (attempt {attempt})", (left.max(0) + 999) / 1000)
                    }
                };
                view! {
                    <span class="countdown server-retry">{when}</span>
                    <button on:click=move |_| server_call("POST", "retry")>"Retry now"</button>
                    <button class="secondary" on:click=move |_| server_call("DELETE", "waiting-retry")>"Cancel"</button>
                }
                .into_any()
            }
            (None, State::Idle) if retryable && background() => view! {
                <span>"This turn can be retried."</span>
                <button on:click=move |_| server_call("POST", "retry")>"Retry"</button>
            }
            .into_any(),
            (None, state) => match state {
            State::Armed { kind: ArmKind::Countdown, fires_at, attempt, .. } => {
                let secs = move || ((fires_at - now.get()).max(0) + 999) / 1000;
                view! {
                    <span class="countdown">{move || format!("Retrying in {} s (attempt {attempt})", secs())}</span>
                    <button on:click=retry_now>"Retry now"</button>
                    <button class="secondary" on:click=cancel>"Cancel"</button>
                }
                .into_any()
            }
            State::Armed { kind: ArmKind::Scheduled, fires_at, .. } => view! {
                <span class="countdown">{format!("Provider asked to wait. Retry after {}", hhmm(fires_at))}</span>
                <button on:click=retry_now>"Retry now"</button>
                <button class="secondary" on:click=cancel>"Cancel"</button>
            }
            .into_any(),
            State::Dispatching { .. } => view! {
                <span class="countdown">"Retrying…"</span>
                <button class="secondary" on:click=cancel>"Cancel"</button>
            }
            .into_any(),
            State::Cancelled => view! {
                <span>"Automatic retry cancelled."</span>
                <button on:click=retry_now>"Retry now"</button>
            }
            .into_any(),
            State::Idle if retryable => view! {
                <span>"This turn can be retried."</span>
                <button on:click=retry_now>"Retry"</button>
            }
            .into_any(),
            State::Idle => view! {
                <span class="advice">{advice(&class)}</span>
            }
            .into_any(),
            },
        };
        Some(view! {
            <div class="retry-banner" role="status" aria-live="polite" data-class=class.clone()>
                <strong class="why">{describe(&class)}</strong>
                <CooldownNote cooldown=cooldown/>
                {body}
                <span class="error">{move || retrier.error.get()}</span>
            </div>
        })
    }
}

/// The failure class in plain words.
pub fn describe(class: &str) -> &'static str {
    match class {
        "rate_limited" => "The provider is rate limiting.",
        "overloaded" => "The provider is overloaded.",
        "server_error" => "The provider had a server error.",
        "network" => "The provider could not be reached.",
        "stream_interrupted" => "The reply was cut off.",
        "interrupted" => "The server stopped while this reply was being written.",
        "context_overflow" => "The conversation is too long for the model.",
        "auth_failed" => "The provider rejected the API key.",
        "credentials_unresolved" => "No API key is configured.",
        "spend_limit_exceeded" => "The session's token budget is spent.",
        "quota_exhausted" => "The provider account is out of quota.",
        "invalid_request" => "The provider refused the request.",
        _ => "The reply failed.",
    }
}
