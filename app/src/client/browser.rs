//! Browser adapters: `fetch` and JSON through web-sys.
use super::ClientError;
use crate::wire::Event;
use serde::de::DeserializeOwned;
use std::future::Future;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;

/// Parses JSON text as `T` with the browser's `JSON.parse` and serde-wasm-bindgen, which cost
/// the bundle far less than serde_json's parser compiled once per answer type; the error in
/// words. Integers are JS numbers on the way: exact up to 2^53, far above any the API sends
/// (ids are strings; ms timestamps, sequence numbers and event ids stay below it).
pub fn parse_json<T: DeserializeOwned>(text: &str) -> Result<T, String> {
    let value = js_sys::JSON::parse(text).map_err(|e| js_text(&e))?;
    serde_wasm_bindgen::from_value(value).map_err(|e| js_text(&e.into()))
}

/// A JS value in words: an `Error`'s message (a failed fetch's "Failed to fetch", which
/// `JSON.stringify` would turn into `{}`), a string, else its JSON.
fn js_text(v: &JsValue) -> String {
    if let Some(e) = v.dyn_ref::<js_sys::Error>() {
        return String::from(e.message());
    }
    v.as_string()
        .or_else(|| js_sys::JSON::stringify(v).ok().and_then(|s| s.as_string()))
        .unwrap_or_else(|| "unknown error".into())
}

/// An `AbortController` for one request.
#[derive(Clone)]
pub struct Abort(web_sys::AbortController);

impl Abort {
    pub fn new() -> Option<Abort> {
        web_sys::AbortController::new().ok().map(Abort)
    }
    pub fn abort(&self) {
        self.0.abort();
    }
}

/// Calls the API with a JSON body, abortable; parses a 2xx answer as `T`, else the error.
/// Only the last step is generic: the request and `JSON.parse` are compiled once, not once
/// per `T`.
pub fn fetch_json_with<'a, T: DeserializeOwned + 'a>(
    method: &'a str,
    url: &'a str,
    body: Option<String>,
    abort: Option<&'a Abort>,
) -> impl Future<Output = Result<T, ClientError>> + 'a {
    let answer = fetch_value(method, url, body, abort);
    async move {
        serde_wasm_bindgen::from_value(answer.await?).map_err(|e| unreadable(js_text(&e.into())))
    }
}

fn unreadable(why: String) -> ClientError {
    ClientError::network(format!("unreadable answer: {why}"))
}

/// Calls the API; the body of a 2xx answer through `JSON.parse`, else the error.
async fn fetch_value(
    method: &str,
    url: &str,
    body: Option<String>,
    abort: Option<&Abort>,
) -> Result<JsValue, ClientError> {
    let init = web_sys::RequestInit::new();
    if let Some(a) = abort {
        init.set_signal(Some(&a.0.signal()));
    }
    init.set_method(method);
    init.set_credentials(web_sys::RequestCredentials::SameOrigin);
    let headers = web_sys::Headers::new().map_err(|e| ClientError::network(js_text(&e)))?;
    let _ = headers.set("accept", "application/json");
    if let Some(b) = &body {
        let _ = headers.set("content-type", "application/json");
        init.set_body(&JsValue::from_str(b));
    }
    init.set_headers(&headers);
    let window = web_sys::window().ok_or_else(|| ClientError::network("no window"))?;
    let resp = JsFuture::from(window.fetch_with_str_and_init(url, &init))
        .await
        .map_err(|e| ClientError::network(js_text(&e)))?;
    let resp: web_sys::Response = resp
        .dyn_into()
        .map_err(|e| ClientError::network(js_text(&e)))?;
    let text = JsFuture::from(resp.text().map_err(|e| ClientError::network(js_text(&e)))?)
        .await
        .map_err(|e| ClientError::network(js_text(&e)))?
        .as_string()
        .unwrap_or_default();
    if !resp.ok() {
        return Err(ClientError::from_answer(resp.status(), &text));
    }
    js_sys::JSON::parse(&text).map_err(|e| unreadable(js_text(&e)))
}

/// An event from its SSE name and data, read by [`Event::read`] from the browser's own JSON
/// parse; `None` for names this build doesn't know and for data it cannot read.
pub(super) fn parse_event(name: &str, data: &str) -> Option<Event> {
    let value = js_sys::JSON::parse(data).ok()?;
    Event::read(name, serde_wasm_bindgen::Deserializer::from(value))?.ok()
}

/// The tab's id from its session storage, made and kept there the first time.
pub(super) fn tab_id() -> Option<String> {
    const KEY: &str = "mulligan-tab";
    let storage = web_sys::window()?.session_storage().ok()??;
    if let Some(id) = storage
        .get_item(KEY)
        .ok()
        .flatten()
        .filter(|id| crate::wire::is_tab_id(id))
    {
        return Some(id);
    }
    // 52 random bits, as hex: a tab's id only tells tabs apart.
    let bits = (js_sys::Math::random() * 4_503_599_627_370_496.0) as u64;
    let id = format!("tab-{bits:x}");
    storage.set_item(KEY, &id).ok()?;
    Some(id)
}
