//! The contract's error shape and the request limits.
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorBody {
    pub code: String,
    pub message: String,
}

/// `{"error": {"code", "message"}}`, the shape of every refusal.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ApiError {
    pub error: ErrorBody,
}

/// Request bodies over this get 413.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;
