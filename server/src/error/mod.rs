//! The bottom floor's error: what went wrong in words every floor shares (`Kind`, the
//! engine's refusals), which the store's errors convert into and `http::error` maps to the
//! contract's shape.
mod refusal;

use app::wire::ErrorCode;
pub use refusal::Refusal;
use std::fmt;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    Unauthorized,
    Forbidden,
    NotFound,
    Invalid,
    PayloadTooLarge,
    Conflict,
    /// One of the engine's refusals, with its own code (`retry.busy`, `regenerate.stale`, …): 409.
    Refused(Refusal),
    /// The session's lock was not free within its bound (503 `session.busy`).
    Busy,
    /// The database did not answer (503 `database.unavailable`).
    Unavailable,
    /// The database's disk is full (507 `storage.full`).
    StorageFull,
    Internal,
}

#[derive(Clone, Debug)]
pub struct Error {
    pub kind: Kind,
    pub message: String,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn new(kind: Kind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
        }
    }
    /// `id` is quoted as a string, escapes and all.
    pub fn not_found(what: &str, id: impl std::fmt::Display) -> Self {
        Error::new(
            Kind::NotFound,
            format!("no {what} with id {:?}", id.to_string()),
        )
    }
    pub fn invalid(message: impl Into<String>) -> Self {
        Error::new(Kind::Invalid, message)
    }
    pub fn conflict(message: impl Into<String>) -> Self {
        Error::new(Kind::Conflict, message)
    }
    /// The session's lock stayed taken past the wait's bound.
    pub fn busy(session_id: impl std::fmt::Display) -> Self {
        Error::new(
            Kind::Busy,
            format!("session {session_id} is busy with another request; try again in a moment"),
        )
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Error::new(Kind::Internal, message)
    }

    /// The contract's `error.code`.
    pub fn code(&self) -> ErrorCode {
        match &self.kind {
            Kind::Unauthorized => ErrorCode::Unauthorized,
            Kind::Forbidden => ErrorCode::Forbidden,
            Kind::NotFound => ErrorCode::NotFound,
            Kind::Invalid => ErrorCode::InvalidRequest,
            Kind::PayloadTooLarge => ErrorCode::PayloadTooLarge,
            Kind::Conflict => ErrorCode::Conflict,
            Kind::Refused(refusal) => refusal.code(),
            Kind::Busy => ErrorCode::SessionBusy,
            Kind::Unavailable => ErrorCode::DatabaseUnavailable,
            Kind::StorageFull => ErrorCode::StorageFull,
            Kind::Internal => ErrorCode::Internal,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code(), self.message)
    }
}

impl std::error::Error for Error {}

/// A refusal's message is its own: it says what to do.
impl From<Refusal> for Error {
    fn from(refusal: Refusal) -> Self {
        Error {
            message: refusal.to_string(),
            kind: Kind::Refused(refusal),
        }
    }
}
