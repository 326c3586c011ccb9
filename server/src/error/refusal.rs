//! The engine's refusals as types: one variant per request it turns down, with its code.
use app::wire::{ErrorCode, MessageId, RunId, RunStatus, SessionId};

/// A request the engine turns down (all answered 409); its message says what to do instead.
/// `Error` takes it in as `Kind::Refused`, and `http::error` answers its [`Refusal::code`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Retry-now while a run of the session is running or queued.
    #[error("a run is running or queued in this session: wait for it or cancel it")]
    RetryBusy,
    /// Retry-now when the session's last turn ended without failing.
    #[error("the last turn did not fail (it is {status}): there is nothing to retry; regenerate its prompt to run it again")]
    LastTurnNotFailed { status: RunStatus },
    /// Retry-now in a session with no turn at all.
    #[error("this session has no turn to retry: send a prompt first")]
    NoTurnToRetry,
    /// Regenerate of a prompt a later regenerate superseded.
    #[error("message {message} is superseded: regenerate from a prompt still in the conversation")]
    PromptSuperseded { message: MessageId },
    /// Regenerate whose `if_last_run` is no longer the prompt's latest run that may be retried.
    #[error("run {expected} is no longer this prompt's latest ended run (latest: {}); someone already retried it", latest_of(latest))]
    NotLatestRun {
        expected: RunId,
        latest: Option<(RunId, RunStatus)>,
    },
    /// An agent token acting on a session outside its own family.
    #[error("session {session} is not a descendant of {caller}: an agent token acts only on its own session's sub-sessions")]
    NotFamily {
        session: SessionId,
        caller: SessionId,
    },
    /// Cancel of a run that has already ended.
    #[error("run {run} has already ended: there is nothing to cancel")]
    RunEnded { run: RunId },
    /// Cancel of a run another instance executes, which has not stopped it within the wait.
    #[error("the instance executing run {run} has not stopped it yet; it will be stopped when that instance answers or its lease lapses")]
    CancelPending { run: RunId },
    /// Stop of a session doing nothing.
    #[error("nothing is running, queued or waiting to retry in this session")]
    NothingToStop,
    /// Cancel of a waiting background retry when none waits.
    #[error("this session has no waiting background retry")]
    NoWaitingRetry,
    /// Dismiss-retry of a run that did not fail.
    #[error("run {run} is {status}, not failed: there is no automatic retry to cancel")]
    NotFailed { run: RunId, status: RunStatus },
    /// A decision on a tool call that was decided already.
    #[error(
        "tool call {call} was already decided: {decision}{}; the first decision stands",
        by_of(by)
    )]
    ApprovalDecided {
        call: app::wire::ToolCallId,
        decision: app::wire::Decision,
        by: Option<app::wire::DecidedBy>,
    },
    /// A decision on a tool call that waits for none.
    #[error("tool call {call} is {status}, not waiting for a decision")]
    ApprovalNotWaiting {
        call: app::wire::ToolCallId,
        status: &'static str,
    },
    /// This instance's end of a run it no longer owns (its lease lapsed): fenced.
    #[error(
        "this instance's lease on run {run} lapsed; the run's end waits for its next heartbeat"
    )]
    LeaseLapsed { run: RunId },
}

impl Refusal {
    /// The contract's `error.code`.
    pub fn code(&self) -> ErrorCode {
        match self {
            Refusal::RetryBusy => ErrorCode::RetryBusy,
            Refusal::LastTurnNotFailed { .. } | Refusal::NoTurnToRetry => {
                ErrorCode::RetryNothingFailed
            }
            Refusal::PromptSuperseded { .. } | Refusal::NotLatestRun { .. } => {
                ErrorCode::RegenerateStale
            }
            Refusal::NotFamily { .. } => ErrorCode::SubsessionsNotFamily,
            Refusal::ApprovalDecided { .. } => ErrorCode::ApprovalDecided,
            Refusal::ApprovalNotWaiting { .. } => ErrorCode::ApprovalNotWaiting,
            Refusal::RunEnded { .. }
            | Refusal::CancelPending { .. }
            | Refusal::NothingToStop
            | Refusal::NoWaitingRetry
            | Refusal::NotFailed { .. }
            | Refusal::LeaseLapsed { .. } => ErrorCode::Conflict,
        }
    }
}

fn by_of(by: &Option<app::wire::DecidedBy>) -> String {
    by.map(|b| format!(" (by {b})")).unwrap_or_default()
}

fn latest_of(latest: &Option<(RunId, RunStatus)>) -> String {
    match latest {
        Some((id, status)) => format!("{id} ({status})"),
        None => "none".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{Error, Kind};
    use crate::http::error::status_of;
    use axum::http::StatusCode;

    fn every() -> Vec<(Refusal, &'static str, &'static str)> {
        let run = RunId::new("r1");
        vec![
            (Refusal::RetryBusy, "retry.busy", "wait for it"),
            (
                Refusal::LastTurnNotFailed {
                    status: RunStatus::Completed,
                },
                "retry.nothing_failed",
                "(it is completed)",
            ),
            (Refusal::NoTurnToRetry, "retry.nothing_failed", "no turn"),
            (
                Refusal::PromptSuperseded {
                    message: MessageId::new("m1"),
                },
                "regenerate.stale",
                "message m1 is superseded",
            ),
            (
                Refusal::NotLatestRun {
                    expected: run.clone(),
                    latest: Some((RunId::new("r2"), RunStatus::Running)),
                },
                "regenerate.stale",
                "(latest: r2 (running))",
            ),
            (
                Refusal::NotLatestRun {
                    expected: run.clone(),
                    latest: None,
                },
                "regenerate.stale",
                "(latest: none)",
            ),
            (
                Refusal::NotFamily {
                    session: SessionId::new("s2"),
                    caller: SessionId::new("s1"),
                },
                "subsessions.not_family",
                "session s2 is not a descendant of s1",
            ),
            (
                Refusal::RunEnded { run: run.clone() },
                "conflict",
                "run r1 has already ended",
            ),
            (
                Refusal::CancelPending { run: run.clone() },
                "conflict",
                "run r1 has not stopped",
            ),
            (Refusal::NothingToStop, "conflict", "nothing is running"),
            (Refusal::NoWaitingRetry, "conflict", "no waiting background"),
            (
                Refusal::NotFailed {
                    run: run.clone(),
                    status: RunStatus::Cancelled,
                },
                "conflict",
                "run r1 is cancelled, not failed",
            ),
            (
                Refusal::LeaseLapsed { run },
                "conflict",
                "lease on run r1 lapsed",
            ),
        ]
    }

    #[test]
    fn each_refusal_answers_409_with_its_code_and_says_why() {
        for (refusal, code, says) in every() {
            let e = Error::from(refusal.clone());
            assert_eq!(e.kind, Kind::Refused(refusal.clone()));
            assert_eq!(e.code().as_str(), code, "{refusal:?}");
            assert_eq!(status_of(&e.kind), StatusCode::CONFLICT, "{refusal:?}");
            assert_eq!(e.message, refusal.to_string());
            assert!(e.message.contains(says), "{refusal:?}: {}", e.message);
        }
    }

    #[tokio::test]
    async fn the_answer_is_the_contracts_shape() {
        use axum::response::IntoResponse;
        let response = Error::from(Refusal::RetryBusy).into_response();
        assert_eq!(response.status(), StatusCode::CONFLICT);
        let body = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .unwrap();
        let body: app::wire::ApiError = serde_json::from_slice(&body).unwrap();
        assert_eq!(body.error.code, ErrorCode::RetryBusy);
        assert_eq!(body.error.message, Refusal::RetryBusy.to_string());
    }
}
