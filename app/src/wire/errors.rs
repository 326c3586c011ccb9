//! The contract's error shape and codes, and the request limits.
use super::text::words;
use serde::{Deserialize, Serialize};

words! {
    /// The contract's `error.code` (CONTRACT §2): the kinds of error and the typed refusals.
    /// Open: a code this build does not know (a newer server) decodes to `Other` with its
    /// word, so the refusal still reaches the operator with its message.
    open enum ErrorCode {
        Unauthorized = "unauthorized",
        Forbidden = "forbidden",
        NotFound = "not_found",
        InvalidRequest = "invalid_request",
        PayloadTooLarge = "payload_too_large",
        Conflict = "conflict",
        Internal = "internal",
        /// Retry-now while a run of the session is active.
        RetryBusy = "retry.busy",
        /// Retry-now with no failed last turn to retry.
        RetryNothingFailed = "retry.nothing_failed",
        /// Retry-now on a turn that was stopped.
        RetryStopped = "retry.stopped",
        /// Regenerate whose `if_last_run` is no longer the anchor's latest failed run.
        RegenerateStale = "regenerate.stale",
        /// The session's lock stayed taken past the wait's bound (another request or
        /// instance is deciding about it): try again. Answered with 503.
        SessionBusy = "session.busy",
        /// The database did not answer (down, unreachable, or out of connections for
        /// longer than a request waits): nothing was done; try again. Answered with 503.
        DatabaseUnavailable = "database.unavailable",
        /// The database's disk is full: nothing was written; free space, then try again.
        /// Answered with 507.
        StorageFull = "storage.full",
        /// A decision on a tool call that was decided already (the answer says how).
        ApprovalDecided = "approval.decided",
        /// A decision on a tool call that does not wait for one.
        ApprovalNotWaiting = "approval.not_waiting",
        /// An agent token acting on a session outside its own family.
        SubsessionsNotFamily = "subsessions.not_family",
        /// Client side only, never sent: the request got no answer.
        Network = "network",
        /// Client side only, never sent: an answer without the contract's error body.
        Http = "http",
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct ErrorBody {
    pub code: ErrorCode,
    pub message: String,
}

/// `{"error": {"code", "message"}}`, the shape of every refusal.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct ApiError {
    pub error: ErrorBody,
}

/// Request bodies over this get 413.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;
