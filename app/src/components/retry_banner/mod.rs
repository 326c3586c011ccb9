//! Tier 2 in the page: [`Retrier`] drives the pure [`Tier2`](crate::tier2::Tier2) machine
//! with browser timers and an abortable regenerate call, and [`RetryBanner`] shows its state
//! in one banner docked above the composer —
//! "Retrying in 8 s (attempt 3)", "Provider cooling down: retry after 14:32 (in 49 min)",
//! "Automatic retry cancelled — Retry now", or why a failure is not retried and what to do.

use super::cooldown_note;
use super::retrier::Retrier;
use super::state::Chat;
use crate::api;
use crate::client::{fetch_json, PageLocal};
use crate::clock::{at_with_hint, now_ms};
use crate::tier2::{ArmKind, Input, State};
use crate::wire::{AutoRetry, RetryClass, RetryReceipt, Run, RunStatus, Session};
use leptos::prelude::*;
use std::time::Duration;

/// What the operator can do about a failure that is not retried automatically (the banner's
/// headline already says what happened).
fn advice(class: &RetryClass) -> &'static str {
    match class {
        RetryClass::AuthFailed => "Fix MULLIGAN_API_KEY and restart, then Regenerate.",
        RetryClass::CredentialsUnresolved => "Set MULLIGAN_API_KEY and restart, then Regenerate.",
        RetryClass::SpendLimitExceeded => {
            "Raise MULLIGAN_SPEND_LIMIT_TOKENS or start a new session."
        }
        RetryClass::QuotaExhausted => "Top the provider account up, then Regenerate.",
        RetryClass::ContextOverflow => "Shorten the prompt or start a new session.",
        RetryClass::InvalidRequest => "Edit the prompt and send it again.",
        RetryClass::MaxSteps => "Raise MULLIGAN_MAX_STEPS or split the task, then Regenerate.",
        _ => "Regenerate to try again.",
    }
}

/// The banner docked above the composer: countdown, scheduled retry, or why not and what to do.
#[component]
pub fn RetryBanner() -> impl IntoView {
    let chat = expect_context::<Chat>();
    let retrier = expect_context::<Retrier>();
    let cooldown = cooldown_note::watch(chat);
    let cooldown_error = RwSignal::new(None::<String>);
    // A clock that ticks only while a countdown shows: no work while idle.
    let now = RwSignal::new(now_ms());
    let ticker = StoredValue::<_, PageLocal>::new_with_storage(None::<IntervalHandle>);
    let waiting = move || {
        chat.session()
            .with(|s| s.as_ref().and_then(|s| s.waiting_retry.clone()))
    };
    Effect::new(move |_| {
        let armed = matches!(retrier.state.get(), State::Armed { .. }) || waiting().is_some();
        if let Some(Some(h)) = ticker.try_update_value(|t| t.take()) {
            h.clear();
        }
        if armed {
            now.set(now_ms());
            if let Ok(h) = set_interval(move || now.set(now_ms()), Duration::from_millis(250)) {
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
    let clear_cooldown = move |_| {
        let Some(key) = cooldown.with_untracked(|c| c.as_ref().map(|c| c.key.clone())) else {
            return;
        };
        cooldown_note::clear(key, cooldown, cooldown_error);
    };
    // A background session's retries belong to the server: these act on its waiting retry.
    let server_call = move |route: api::Route| {
        let Some(sid) = chat.session_id() else { return };
        retrier.error.set(None);
        leptos::task::spawn_local(async move {
            let url = route.url(&[sid.as_str()]);
            let method = route.method.as_str();
            let res = match route.method {
                api::Method::Post => fetch_json::<RetryReceipt>(method, &url, Some("{}".into()))
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
        chat.session().with(|s| {
            s.as_ref()
                .is_some_and(|s| s.auto_retry == AutoRetry::Background)
        })
    };
    // "Provider cooling down until 09:52 (in 49 min)" and its button, when a cooldown is behind
    // the failure; `lead` starts the sentence the banner's state continues.
    let cooldown_until = move || cooldown.with(|c| c.as_ref().map(|c| (c.until, c.key.clone())));
    let clear_button = move || {
        cooldown_until().map(|(_, key)| {
            view! {
                <button class="secondary" title=format!("Let the next run ask the provider again ({key})")
                    on:click=clear_cooldown>"Clear cooldown"</button>
            }
        })
    };
    move || {
        // The failed turn, or (while a retry is on its way) the failure being retried.
        let (retry, run) = match failed_turn() {
            Some(run) => (run.retry.clone(), Some(run)),
            None if matches!(retrier.state.get(), State::Dispatching { .. }) => {
                let f = retrier.failure.get()?;
                let run = chat
                    .runs
                    .with(|rs| rs.iter().find(|r| r.id == f.run_id).cloned());
                (f.retry, run)
            }
            None => return None,
        };
        // No classification: an empty word, which no sentence matches.
        let class = retry
            .as_ref()
            .map(|r| r.retry_class.clone())
            .unwrap_or_else(|| RetryClass::Other(String::new()));
        let retryable = retry.as_ref().is_some_and(|r| r.retryable);
        let does = run.filter(|_| retryable).map(|r| retry_does(&chat, &r));
        let cooling = cooldown_until().map(|c| c.0);
        // One view for every state (a smaller bundle than one per state): the sentence, the
        // main action, Clear cooldown when one is behind the failure, and Cancel.
        let (text, look, act, cancel): (Signal<String>, &str, Act, Option<bool>) =
            match (waiting(), retrier.state.get()) {
                (Some(w), _) => {
                    let (fires_at, attempt) = (w.fires_at, w.attempt);
                    let when = Signal::derive(move || {
                        let left = fires_at - now.get();
                        if left > 120_000 {
                            format!(
                                "Retrying on the server at {} (attempt {attempt})",
                                at_with_hint(fires_at, now.get())
                            )
                        } else {
                            format!(
                                "Retrying on the server in {} s (attempt {attempt})",
                                (left.max(0) + 999) / 1000
                            )
                        }
                    });
                    (
                        when,
                        "countdown server-retry",
                        Act::ServerRetry("Retry now"),
                        Some(true),
                    )
                }
                (None, State::Idle) if retryable && background() => (
                    fixed(cooling_sentence(cooling, "This turn can be retried.")),
                    "",
                    Act::ServerRetry("Retry"),
                    None,
                ),
                (
                    None,
                    State::Armed {
                        kind: ArmKind::Countdown,
                        fires_at,
                        attempt,
                        ..
                    },
                ) => (
                    Signal::derive(move || {
                        let secs = ((fires_at - now.get()).max(0) + 999) / 1000;
                        format!("Retrying in {secs} s (attempt {attempt})")
                    }),
                    "countdown",
                    Act::Retry("Retry now"),
                    Some(false),
                ),
                (
                    None,
                    State::Armed {
                        kind: ArmKind::Scheduled,
                        fires_at,
                        ..
                    },
                ) => {
                    // One sentence, one time: the cooldown's and the retry's are the same wait.
                    let who = if cooling.is_some() {
                        "Provider cooling down"
                    } else {
                        "Provider asked to wait"
                    };
                    (
                        Signal::derive(move || {
                            format!("{who}: retry after {}", at_with_hint(fires_at, now.get()))
                        }),
                        "countdown scheduled",
                        Act::Retry("Retry now"),
                        Some(false),
                    )
                }
                (None, State::Dispatching { .. }) => (
                    fixed("Retrying…".into()),
                    "countdown",
                    Act::None,
                    Some(false),
                ),
                (None, State::Cancelled) => (
                    fixed(format!(
                        "{} — ",
                        cooling_sentence(cooling, "Automatic retry cancelled")
                    )),
                    "cancelled",
                    Act::Retry("Retry now"),
                    None,
                ),
                (None, State::Idle) if retryable => (
                    fixed(cooling_sentence(cooling, "This turn can be retried.")),
                    "",
                    Act::Retry("Retry"),
                    None,
                ),
                (None, State::Idle) => (fixed(advice(&class).into()), "advice", Act::None, None),
            };
        let main = move |_| match act {
            Act::Retry(_) => retrier.feed(Input::OperatorRetryNow { now: now_ms() }),
            Act::ServerRetry(_) => server_call(api::RETRY.route),
            Act::None => {}
        };
        let stop = move |_| match cancel {
            Some(true) => server_call(api::CANCEL_WAITING_RETRY.route),
            _ => retrier.feed(Input::OperatorCancel),
        };
        Some(view! {
            <div class="retry-banner" role="status" aria-live="polite" data-class=class.to_string()>
                <strong class="why" title=format!("class: {class}")>
                    {describe(&class)}
                    {does.map(|d| view! { " " <span class="retry-does">{d}</span> })}
                </strong>
                <span class=look>{text}</span>
                <span class="actions">
                    {act.label().map(|l| view! { <button on:click=main>{l}</button> })}
                    {clear_button}
                    {cancel.map(|_| view! { <button class="secondary" on:click=stop>"Cancel"</button> })}
                </span>
                <span class="error">{move || retrier.error.get().or_else(|| cooldown_error.get())}</span>
            </div>
        })
    }
}

/// What retrying `run` will do, as the server decides it (CONTRACT §6): continue after the
/// tool calls it ran, resend the prompt when nothing came back, else continue the reply.
fn retry_does(chat: &Chat, run: &Run) -> String {
    let n = run.tools_executed;
    if n > 0 {
        let s = if n == 1 { "" } else { "s" };
        return format!("A retry continues after {n} completed tool call{s}.");
    }
    // Untracked: the failed reply no longer changes, and the banner must not re-render on
    // another reply's deltas.
    let empty = run.reply_message_id.as_ref().is_none_or(|id| {
        chat.messages.with_untracked(|ms| {
            ms.iter()
                .find(|(m, _)| m == id)
                .is_none_or(|(_, m)| m.with_untracked(|m| m.content.is_empty()))
        })
    });
    if empty {
        "A retry resends the prompt.".into()
    } else {
        "A retry continues the partial reply.".into()
    }
}

/// The banner's main button: Tier 2's Retry now here, or the server's retry.
#[derive(Clone, Copy)]
enum Act {
    None,
    Retry(&'static str),
    ServerRetry(&'static str),
}

impl Act {
    fn label(self) -> Option<&'static str> {
        match self {
            Act::None => None,
            Act::Retry(l) | Act::ServerRetry(l) => Some(l),
        }
    }
}

/// A sentence that does not change while shown.
fn fixed(text: String) -> Signal<String> {
    Signal::stored(text)
}

/// `base`, with the cooldown behind it when there is one: "Automatic retry cancelled; the
/// provider is cooling down until 09:52 (in 49 min)".
fn cooling_sentence(until: Option<i64>, base: &str) -> String {
    match until {
        Some(t) => format!(
            "{}; provider cooling down until {}",
            base.trim_end_matches('.'),
            at_with_hint(t, now_ms())
        ),
        None => base.to_string(),
    }
}

/// The failure class in plain words, as a sentence (the banner's headline).
pub fn describe(class: &RetryClass) -> &'static str {
    match class {
        RetryClass::RateLimited => "The provider is rate limiting.",
        RetryClass::Overloaded => "The provider is overloaded.",
        RetryClass::ServerError => "The provider had a server error.",
        RetryClass::Network => "The provider could not be reached.",
        RetryClass::StreamInterrupted => "The reply was cut off.",
        RetryClass::Interrupted => "The server stopped while this reply was being written.",
        RetryClass::Timeout => "The provider did not answer in time.",
        RetryClass::Internal => "Mulligan itself failed this turn.",
        RetryClass::ContextOverflow => "The conversation is too long for the model.",
        RetryClass::AuthFailed => "The provider rejected the API key.",
        RetryClass::CredentialsUnresolved => "No API key is configured.",
        RetryClass::SpendLimitExceeded => "The session's token budget is spent.",
        RetryClass::QuotaExhausted => "The provider account is out of quota.",
        RetryClass::InvalidRequest => "The provider refused the request.",
        RetryClass::MaxSteps => "The turn reached its step limit.",
        RetryClass::ReplyTooLarge => "The reply grew too large.",
        RetryClass::AgentExited => "The agent's process exited mid-turn.",
        RetryClass::AgentError => "The agent failed this turn.",
        _ => "The reply failed.",
    }
}

/// The failure class as a short label ("Rate limited"); the class itself goes in a tooltip.
pub fn label(class: &RetryClass) -> &'static str {
    match class {
        RetryClass::RateLimited => "Rate limited",
        RetryClass::Overloaded => "Provider overloaded",
        RetryClass::ServerError => "Provider error",
        RetryClass::Network => "Provider unreachable",
        RetryClass::StreamInterrupted => "Reply cut off",
        RetryClass::Interrupted => "Interrupted by a restart",
        RetryClass::Timeout => "Provider timed out",
        RetryClass::Internal => "Mulligan error",
        RetryClass::ContextOverflow => "Conversation too long",
        RetryClass::AuthFailed => "API key rejected",
        RetryClass::CredentialsUnresolved => "No API key",
        RetryClass::SpendLimitExceeded => "Token budget spent",
        RetryClass::QuotaExhausted => "Out of quota",
        RetryClass::InvalidRequest => "Request refused",
        RetryClass::MaxSteps => "Step limit reached",
        RetryClass::ReplyTooLarge => "Reply too large",
        RetryClass::AgentExited => "Agent exited",
        RetryClass::AgentError => "Agent error",
        _ => "Failed",
    }
}
