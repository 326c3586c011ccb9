//! The HTTP API's endpoint table (CONTRACT §2): each endpoint's method and route, typed by the
//! body it takes and the answer it gives. The axum router mounts these routes and every client
//! (the browser, the CLI, the tests, the bench) builds its URLs from them, so the API is
//! spelled out once. A native client over it is in [`native`] (feature `native`).
use crate::wire::{
    Approvals, ClearCooldown, ClientConfig, CreateSession, CreatedSession, DecideToolCall,
    DecidedCall, ModelList, PatchSession, PostMessage, ProvidersResponse, Receipt, Regenerate,
    Released, RetryReceipt, Run, RunDetail, Session, SessionDetail, SessionList, ToolsResponse,
};
use std::marker::PhantomData;

#[cfg(feature = "native")]
pub mod native;

/// Where the API is mounted.
pub const PREFIX: &str = "/api/v1";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    Get,
    Post,
    Patch,
    Delete,
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Patch => "PATCH",
            Method::Delete => "DELETE",
        }
    }
}

/// A route: its method and its path under [`PREFIX`] as axum routes it (`/sessions/{sid}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route {
    pub method: Method,
    pub path: &'static str,
}

impl Route {
    /// The URL path (prefix included) with each `{…}` filled by the next of `args`,
    /// percent-encoded; a missing argument leaves the segment empty.
    pub fn url(&self, args: &[&str]) -> String {
        let mut out = String::with_capacity(PREFIX.len() + self.path.len() + 64);
        out.push_str(PREFIX);
        let mut args = args.iter();
        let mut rest = self.path;
        while let Some(open) = rest.find('{') {
            out.push_str(&rest[..open]);
            let close = rest[open..].find('}').map_or(rest.len(), |c| open + c + 1);
            encode_segment(args.next().copied().unwrap_or(""), &mut out);
            rest = &rest[close..];
        }
        out.push_str(rest);
        out
    }
}

/// Appends `segment` percent-encoded: only RFC 3986's unreserved characters pass as they are
/// (a path segment's or a query value's encoding).
pub fn encode_segment(segment: &str, out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for b in segment.bytes() {
        if crate::wire::is_unreserved(b) {
            out.push(b as char);
        } else {
            out.push('%');
            out.push(HEX[usize::from(b >> 4)] as char);
            out.push(HEX[usize::from(b & 0xf)] as char);
        }
    }
}

/// An endpoint: a route typed by its request body `Req` (`()`: none) and its answer `Resp`.
pub struct Endpoint<Req, Resp> {
    pub route: Route,
    _types: PhantomData<fn(Req) -> Resp>,
}

impl<Req, Resp> Endpoint<Req, Resp> {
    const fn new(method: Method, path: &'static str) -> Self {
        Endpoint {
            route: Route { method, path },
            _types: PhantomData,
        }
    }

    /// The URL path with its arguments (see [`Route::url`]).
    pub fn url(&self, args: &[&str]) -> String {
        self.route.url(args)
    }

    /// The HTTP method, as fetch and reqwest spell it.
    pub fn method(&self) -> &'static str {
        self.route.method.as_str()
    }
}

pub const CREATE_SESSION: Endpoint<CreateSession, CreatedSession> =
    Endpoint::new(Method::Post, "/sessions");
pub const LIST_SESSIONS: Endpoint<(), SessionList> = Endpoint::new(Method::Get, "/sessions");
pub const SESSION: Endpoint<(), SessionDetail> = Endpoint::new(Method::Get, "/sessions/{sid}");
pub const PATCH_SESSION: Endpoint<PatchSession, Session> =
    Endpoint::new(Method::Patch, "/sessions/{sid}");
pub const POST_MESSAGE: Endpoint<PostMessage, Receipt> =
    Endpoint::new(Method::Post, "/sessions/{sid}/messages");
pub const RELEASE: Endpoint<(), Released> = Endpoint::new(Method::Post, "/sessions/{sid}/release");
pub const RETRY: Endpoint<(), RetryReceipt> = Endpoint::new(Method::Post, "/sessions/{sid}/retry");
pub const CANCEL_WAITING_RETRY: Endpoint<(), Session> =
    Endpoint::new(Method::Delete, "/sessions/{sid}/waiting-retry");
pub const REGENERATE: Endpoint<Regenerate, Receipt> =
    Endpoint::new(Method::Post, "/sessions/{sid}/messages/{mid}/regenerate");
pub const CANCEL_RUN: Endpoint<(), Run> =
    Endpoint::new(Method::Post, "/sessions/{sid}/runs/{rid}/cancel");
pub const DISMISS_RETRY: Endpoint<(), Run> =
    Endpoint::new(Method::Post, "/sessions/{sid}/runs/{rid}/dismiss-retry");
/// Server-Sent Events (CONTRACT §2 "Events"), resumable with `Last-Event-ID`.
pub const EVENTS: Route = Route {
    method: Method::Get,
    path: "/sessions/{sid}/events",
};
/// Server-Sent Events of several sessions in one stream (`?sessions=ID:LAST_EVENT_ID,…`, see
/// [`crate::wire::Following`]): a browser's tabs share one, so any number of tabs work over
/// HTTP/1.1's six connections.
pub const FOLLOW: Route = Route {
    method: Method::Get,
    path: "/events",
};
pub const RUN: Endpoint<(), RunDetail> = Endpoint::new(Method::Get, "/runs/{rid}");
pub const DECIDE_TOOL_CALL: Endpoint<DecideToolCall, DecidedCall> =
    Endpoint::new(Method::Post, "/runs/{rid}/tool_calls/{cid}/decision");
pub const APPROVALS: Endpoint<(), Approvals> = Endpoint::new(Method::Get, "/approvals");
pub const PROVIDERS: Endpoint<(), ProvidersResponse> = Endpoint::new(Method::Get, "/providers");
pub const CLEAR_COOLDOWN: Endpoint<ClearCooldown, ProvidersResponse> =
    Endpoint::new(Method::Delete, "/providers/cooldowns");
/// The catalogue's models with their status (CONTRACT §7).
pub const MODELS: Endpoint<(), ModelList> = Endpoint::new(Method::Get, "/models");
pub const CONFIG: Endpoint<(), ClientConfig> = Endpoint::new(Method::Get, "/config");
/// The tool sources (CONTRACT §6): each configured MCP server and the built-in `mulligan`.
pub const TOOLS: Endpoint<(), ToolsResponse> = Endpoint::new(Method::Get, "/tools");
/// This API's OpenAPI 3.1 document (kept in `docs/openapi.json`), built from this table.
pub const OPENAPI: Route = Route {
    method: Method::Get,
    path: "/openapi.json",
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_fill_and_encode_their_segments() {
        assert_eq!(LIST_SESSIONS.url(&[]), "/api/v1/sessions");
        assert_eq!(
            REGENERATE.url(&["s_1", "m 2/x"]),
            "/api/v1/sessions/s_1/messages/m%202%2Fx/regenerate"
        );
        assert_eq!(EVENTS.url(&["s~é"]), "/api/v1/sessions/s~%C3%A9/events");
        assert_eq!(RUN.url(&[]), "/api/v1/runs/");
        assert_eq!(CANCEL_RUN.route.method.as_str(), "POST");
    }
}
