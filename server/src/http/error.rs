//! The contract's error shape on the wire, and body, path and query extractors whose every
//! rejection answers in that shape (400 malformed, 413 too large, 422 wrong types).
use crate::error::{Error, Kind};
use app::wire::{ApiError, ErrorBody, ErrorCode};
use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

pub fn status_of(kind: &Kind) -> StatusCode {
    match kind {
        Kind::Unauthorized => StatusCode::UNAUTHORIZED,
        Kind::Forbidden => StatusCode::FORBIDDEN,
        Kind::NotFound => StatusCode::NOT_FOUND,
        Kind::Invalid => StatusCode::UNPROCESSABLE_ENTITY,
        Kind::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        Kind::Conflict | Kind::Refused(_) => StatusCode::CONFLICT,
        Kind::Busy | Kind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Kind::StorageFull => StatusCode::INSUFFICIENT_STORAGE,
        Kind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// An error response with an explicit status (e.g. 400 for a malformed body).
pub fn respond(status: StatusCode, code: ErrorCode, message: impl Into<String>) -> Response {
    let body = ApiError {
        error: ErrorBody {
            code,
            message: message.into(),
        },
    };
    (status, axum::Json(body)).into_response()
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        respond(status_of(&self.kind), self.code(), self.message)
    }
}

/// `axum::Json`, with rejections in the contract's shape.
pub struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    axum::Json<T>: FromRequest<S, Rejection = JsonRejection>,
    S: Send + Sync,
{
    type Rejection = Response;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(v)) => Ok(ApiJson(v)),
            Err(rejection) => Err(json_rejection(rejection)),
        }
    }
}

fn json_rejection(r: JsonRejection) -> Response {
    let reason = r.body_text();
    match r {
        JsonRejection::JsonDataError(_) => respond(
            StatusCode::UNPROCESSABLE_ENTITY,
            ErrorCode::InvalidRequest,
            reason,
        ),
        JsonRejection::MissingJsonContentType(_) => respond(
            StatusCode::BAD_REQUEST,
            ErrorCode::InvalidRequest,
            "send the body as JSON with Content-Type: application/json",
        ),
        _ if r.status() == StatusCode::PAYLOAD_TOO_LARGE => respond(
            StatusCode::PAYLOAD_TOO_LARGE,
            ErrorCode::PayloadTooLarge,
            format!(
                "request bodies are limited to {} bytes",
                app::wire::MAX_BODY_BYTES
            ),
        ),
        _ => respond(StatusCode::BAD_REQUEST, ErrorCode::InvalidRequest, reason),
    }
}

/// An optional JSON body: empty means `None`; anything else must be valid JSON for `T`.
impl<S, T> axum::extract::OptionalFromRequest<S> for ApiJson<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = Response;

    async fn from_request(req: Request, state: &S) -> Result<Option<Self>, Self::Rejection> {
        let bytes = match axum::body::Bytes::from_request(req, state).await {
            Ok(b) => b,
            Err(r) if r.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                return Err(respond(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    ErrorCode::PayloadTooLarge,
                    format!(
                        "request bodies are limited to {} bytes",
                        app::wire::MAX_BODY_BYTES
                    ),
                ))
            }
            Err(r) => {
                return Err(respond(
                    StatusCode::BAD_REQUEST,
                    ErrorCode::InvalidRequest,
                    r.body_text(),
                ))
            }
        };
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(None);
        }
        match axum::Json::<T>::from_bytes(&bytes) {
            Ok(axum::Json(v)) => Ok(Some(ApiJson(v))),
            Err(rejection) => Err(json_rejection(rejection)),
        }
    }
}

/// `axum::extract::Path`, with rejections in the contract's shape (400 with the reason, e.g. a
/// segment that is not UTF-8).
pub struct ApiPath<T>(pub T);

impl<S, T> FromRequestParts<S> for ApiPath<T>
where
    T: serde::de::DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(v)) => Ok(ApiPath(v)),
            Err(r) => Err(parts_rejection(r.status(), r.body_text())),
        }
    }
}

/// `axum::extract::Query`, with rejections in the contract's shape (400 with the reason, e.g.
/// a parameter given twice).
pub struct ApiQuery<T>(pub T);

impl<S, T> FromRequestParts<S> for ApiQuery<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(v)) => Ok(ApiQuery(v)),
            Err(r) => Err(parts_rejection(r.status(), r.body_text())),
        }
    }
}

/// A path or query the client got wrong is 400; a route whose handler does not fit its path
/// (a bug of ours) stays a 500.
fn parts_rejection(status: StatusCode, reason: String) -> Response {
    if status.is_server_error() {
        tracing::error!(%reason, "a route's parameters do not fit its handler");
        respond(
            StatusCode::INTERNAL_SERVER_ERROR,
            ErrorCode::Internal,
            "the server failed to read this route; see the server log",
        )
    } else {
        respond(StatusCode::BAD_REQUEST, ErrorCode::InvalidRequest, reason)
    }
}

/// Any `/api/v1` route asked with a method it does not answer: 405 (axum adds `Allow`).
pub async fn method_not_allowed(method: axum::http::Method) -> Response {
    respond(
        StatusCode::METHOD_NOT_ALLOWED,
        ErrorCode::InvalidRequest,
        format!("this route does not answer {method}; the Allow header lists the methods it does"),
    )
}

/// Any path under `/api/v1` that is no route: 404.
pub async fn no_such_route() -> Response {
    respond(
        StatusCode::NOT_FOUND,
        ErrorCode::NotFound,
        "no such API route",
    )
}
