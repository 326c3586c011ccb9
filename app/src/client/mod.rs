//! The browser's side of the API: JSON over fetch (with an optional AbortSignal) and the
//! sessions' events (one connection per browser, shared by its tabs). On the server these
//! are inert: components call them only from effects and event handlers, which run in the
//! browser.
#[cfg(not(feature = "hydrate"))]
use crate::wire::Event;
use crate::wire::{ApiError, ErrorCode};
#[cfg(not(feature = "hydrate"))]
use serde::de::DeserializeOwned;

#[cfg(feature = "hydrate")]
mod browser;
#[cfg(feature = "hydrate")]
mod follow;
#[cfg(feature = "hydrate")]
pub use browser::{fetch_json_with, parse_json, Abort};
#[cfg(feature = "hydrate")]
pub use follow::SessionFeed;

/// Where a component keeps a browser object (a timer, a request's abort, an event stream): on
/// the page's one thread in the browser; on the server, where these are inert placeholders,
/// in shared storage, so a render's owner may be dropped on any of the runtime's threads (a
/// thread-local value dropped elsewhere panics).
#[cfg(feature = "hydrate")]
pub type PageLocal = leptos::prelude::LocalStorage;
#[cfg(not(feature = "hydrate"))]
pub type PageLocal = leptos::prelude::SyncStorage;

/// Calls the API with an optional JSON body; parses a 2xx answer as `T`, else the error.
/// (`fetch_json_with`'s future itself, not one wrapped around it: the browser bundle holds a
/// copy of these futures for every answer type.)
pub fn fetch_json<'a, T: serde::de::DeserializeOwned + 'a>(
    method: &'a str,
    url: &'a str,
    body: Option<String>,
) -> impl std::future::Future<Output = Result<T, ClientError>> + 'a {
    fetch_json_with(method, url, body, None)
}

/// This browser tab's id (`tab-…`, kept in the tab's session storage, so a reload keeps
/// it): what its Tier 2 sends as `from`, so a run's timeline can say "this tab". `None` on
/// the server, or where the page cannot keep one.
#[cfg(feature = "hydrate")]
pub fn tab_id() -> Option<String> {
    thread_local! {
        static ID: Option<String> = browser::tab_id();
    }
    ID.with(Clone::clone)
}

#[cfg(not(feature = "hydrate"))]
pub fn tab_id() -> Option<String> {
    None
}

/// Why a call failed: the API's refusal, or the network.
#[derive(Clone, Debug, PartialEq)]
pub struct ClientError {
    pub status: u16,
    pub code: ErrorCode,
    pub message: String,
}

impl ClientError {
    pub fn network(message: impl Into<String>) -> Self {
        ClientError {
            status: 0,
            code: ErrorCode::Network,
            message: message.into(),
        }
    }

    /// From a non-2xx answer: the contract's `{"error": {...}}`, or the status alone.
    pub fn from_answer(status: u16, body: &str) -> Self {
        match parse_json::<ApiError>(body) {
            Ok(e) => ClientError {
                status,
                code: e.error.code,
                message: e.error.message,
            },
            Err(_) => ClientError {
                status,
                code: ErrorCode::Http,
                message: format!("the server answered {status}"),
            },
        }
    }

    /// What to tell the operator.
    pub fn explain(&self) -> String {
        match self.code {
            ErrorCode::Unauthorized => {
                "Not signed in: open the URL that `mulligan serve` printed.".into()
            }
            ErrorCode::Network => format!("Cannot reach the Mulligan server ({}).", self.message),
            _ => self.message.clone(),
        }
    }
}

/// Parses JSON text as `T`; the error in words. (In the browser, `JSON.parse` parses it:
/// serde_json's parser, compiled once per answer type, is a large part of the bundle.)
#[cfg(not(feature = "hydrate"))]
pub fn parse_json<T: DeserializeOwned>(text: &str) -> Result<T, String> {
    serde_json::from_str(text).map_err(|e| e.to_string())
}

#[cfg(not(feature = "hydrate"))]
pub async fn fetch_json_with<T: DeserializeOwned>(
    _method: &str,
    _url: &str,
    _body: Option<String>,
    _abort: Option<&Abort>,
) -> Result<T, ClientError> {
    Err(ClientError::network("not in a browser"))
}

/// Aborts an in-flight request (inert on the server).
#[cfg(not(feature = "hydrate"))]
#[derive(Clone)]
pub struct Abort;

#[cfg(not(feature = "hydrate"))]
impl Abort {
    pub fn new() -> Option<Abort> {
        Some(Abort)
    }
    pub fn abort(&self) {}
}

/// A session's events as this tab follows them (inert on the server).
#[cfg(not(feature = "hydrate"))]
pub struct SessionFeed;

#[cfg(not(feature = "hydrate"))]
impl SessionFeed {
    pub fn open(
        _sid: &crate::wire::SessionId,
        _after: i64,
        _on_event: impl FnMut(i64, Event) + 'static,
    ) -> SessionFeed {
        SessionFeed
    }
}
