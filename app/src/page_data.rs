//! The data a page opens with: the session list and the open session's snapshot, read by the
//! server before it renders the page and written into it as JSON, so the first HTML shows
//! them and the browser hydrates from the same data without asking again. Each part is used
//! once, by the view that opens with it; everything later comes over the API.
use crate::wire::{ClientConfig, SessionDetail, SessionId, SessionList};
use leptos::prelude::*;
use serde::{Deserialize, Serialize};

/// The id of the `<script type="application/json">` element that carries the data.
pub const ELEMENT_ID: &str = "mulligan-page-data";

/// What a read gives: the data, or what to tell the operator.
pub type Loaded<T> = Result<T, String>;

/// The page's first data.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct PageData {
    /// The session list (absent: the page loads it itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sessions: Option<Loaded<SessionList>>,
    /// The open session, on a session's page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<Loaded<SessionDetail>>,
    /// The server's settings the page works with (Tier 2's schedule), signed in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<ClientConfig>,
}

impl PageData {
    /// The JSON the page carries, safe inside a `<script>` element (no `<` in it).
    #[cfg(feature = "ssr")]
    pub fn to_script_text(&self) -> String {
        serde_json::to_string(self)
            .unwrap_or_else(|_| "{}".into())
            .replace('<', "\\u003c")
    }
}

/// The page's first data in the render's context: the server provides it per request; the
/// browser reads it once from the page.
#[derive(Clone, Copy)]
pub struct FirstData(StoredValue<PageData>);

/// Provides the first data: the server's for this request, or the one the page carries.
pub fn provide_first_data() {
    let data = use_context::<PageData>()
        .or_else(read_from_page)
        .unwrap_or_default();
    provide_context(FirstData(StoredValue::new(data)));
}

/// The first session list, once.
pub fn take_sessions() -> Option<Loaded<SessionList>> {
    let FirstData(data) = use_context::<FirstData>()?;
    data.try_update_value(|d| d.sessions.take()).flatten()
}

/// The first snapshot, once, when it is `id`'s.
pub fn take_session(id: &SessionId) -> Option<Loaded<SessionDetail>> {
    let FirstData(data) = use_context::<FirstData>()?;
    data.try_update_value(|d| match &d.session {
        Some(Ok(s)) if s.session.id != *id => None,
        _ => d.session.take(),
    })
    .flatten()
}

/// The server's settings for the page, when it sent them (every view may read them).
pub fn first_config() -> Option<ClientConfig> {
    let FirstData(data) = use_context::<FirstData>()?;
    data.try_with_value(|d| d.config.clone()).flatten()
}

/// The data the server wrote into the page (the browser's side).
fn read_from_page() -> Option<PageData> {
    #[cfg(feature = "hydrate")]
    {
        let text = document().get_element_by_id(ELEMENT_ID)?.text_content()?;
        crate::client::parse_json(&text).ok()
    }
    #[cfg(not(feature = "hydrate"))]
    None
}

/// The snapshot's URL: superseded messages included (the page folds them away).
pub fn snapshot_url(id: &SessionId) -> String {
    format!(
        "{}?include_superseded=true",
        crate::api::SESSION.url(&[id.as_str()])
    )
}
