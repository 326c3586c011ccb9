//! The data a page opens with: the session list, the open session's snapshot and the server's
//! settings. The server reads them before it renders the page and provides them to the render
//! (`server::http::page`); each view that opens with a part reads it through a Leptos
//! [`SharedValue`], which writes it into the page the server renders and gives the browser
//! the same value while it hydrates, without asking again. Everything later comes over the
//! API.
use crate::wire::{ClientConfig, SessionDetail, SessionId, SessionList};
use leptos::prelude::*;
use leptos::server::codee::{Decoder, Encoder};
use leptos::server::SharedValue;
use serde::{de::DeserializeOwned, Serialize};

/// What a read gives: the data, or what to tell the operator.
pub type Loaded<T> = Result<T, String>;

/// The page's first data, as the server's handler provides it to the render.
#[derive(Clone, Debug, Default)]
pub struct PageData {
    /// The session list (absent: the page loads it itself).
    pub sessions: Option<Loaded<SessionList>>,
    /// The open session, on a session's page.
    pub session: Option<Loaded<SessionDetail>>,
    /// The server's settings the page works with (Tier 2's schedule), signed in.
    pub config: Option<ClientConfig>,
}

impl PageData {
    /// The open session's title, when its snapshot was read.
    pub fn session_title(&self) -> Option<&str> {
        match &self.session {
            Some(Ok(detail)) => Some(&detail.session.title),
            _ => None,
        }
    }
}

/// How a part travels in the page: JSON that the server writes and the browser parses with
/// its own `JSON.parse` ([`crate::client::parse_json`]), not a second copy of serde_json's
/// parser in the bundle.
pub struct PageCodec;

impl<T: Serialize> Encoder<T> for PageCodec {
    type Error = String;
    type Encoded = String;

    fn encode(val: &T) -> Result<String, String> {
        // Only the server writes a page's data: the bundle holds no JSON writer for it.
        #[cfg(feature = "ssr")]
        return serde_json::to_string(val).map_err(|e| e.to_string());
        #[cfg(not(feature = "ssr"))]
        {
            let _ = val;
            Err("a page's data is written by the server".into())
        }
    }
}

impl<T: DeserializeOwned> Decoder<T> for PageCodec {
    type Error = String;
    type Encoded = str;

    fn decode(val: &str) -> Result<T, String> {
        crate::client::parse_json(val)
    }
}

/// One part of the first data, shared from the server's render with the browser's
/// hydration. Elsewhere (a view the browser makes later) there is none, and the view reads
/// it over the API. Server and browser must read the parts in the same order: each view
/// reads its parts once, when it is made.
fn part<T: Serialize + DeserializeOwned>(of: impl FnOnce(&PageData) -> Option<T>) -> Option<T> {
    // Read in place: the data may hold megabytes of replies, and only this part is copied.
    SharedValue::<Option<T>, PageCodec>::new_with_encoding(|| with_context(of).flatten())
        .into_inner()
}

/// The first session list.
pub fn take_sessions() -> Option<Loaded<SessionList>> {
    part(|d| d.sessions.clone())
}

/// The first snapshot, when it is `id`'s.
pub fn take_session(id: &SessionId) -> Option<Loaded<SessionDetail>> {
    part(|d| d.session.clone()).filter(|s| match s {
        Ok(s) => s.session.id == *id,
        Err(_) => true,
    })
}

/// The server's settings for the page, when it sent them.
pub fn first_config() -> Option<ClientConfig> {
    part(|d| d.config.clone())
}

/// The snapshot's URL: superseded messages included (the page folds them away).
pub fn snapshot_url(id: &SessionId) -> String {
    format!(
        "{}?include_superseded=true",
        crate::api::SESSION.url(&[id.as_str()])
    )
}
