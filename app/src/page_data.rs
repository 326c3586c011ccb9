//! The data a page opens with: the session list and the open session's snapshot, read on the
//! server while it renders the page (through the [`PageSource`] the server provides) and sent
//! in the HTML, fetched over the API in the browser when the operator moves on.
use crate::wire::{SessionDetail, SessionList};
use leptos::prelude::*;
use leptos::server::codee::{Decoder, Encoder};
use serde::{de::DeserializeOwned, Serialize};
use std::future::Future;

/// What a load gives: the data, or what to tell the operator.
pub type Loaded<T> = Result<T, String>;

/// Where the server reads a page's data (its engine, for the signed-in operator).
#[cfg(feature = "ssr")]
pub trait PageSource: Send + Sync + 'static {
    fn sessions(&self) -> futures_box::BoxFuture<Loaded<SessionList>>;
    fn session(&self, id: String) -> futures_box::BoxFuture<Loaded<SessionDetail>>;
}

#[cfg(feature = "ssr")]
pub mod futures_box {
    /// A boxed future the server's page source answers with.
    pub type BoxFuture<T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>;
}

/// The page source in the render's context; without one (signed out) loads say so.
#[cfg(feature = "ssr")]
#[derive(Clone)]
pub struct Source(pub std::sync::Arc<dyn PageSource>);

/// Loads a page's data: from the server's source while rendering, else over the API.
#[derive(Clone)]
pub struct Loader {
    #[cfg(feature = "ssr")]
    source: Option<Source>,
}

impl Loader {
    /// The loader for this render (call it in a component, not in a future).
    pub fn here() -> Loader {
        Loader {
            #[cfg(feature = "ssr")]
            source: use_context::<Source>(),
        }
    }

    /// The first page of sessions, newest first.
    pub fn sessions(&self) -> impl Future<Output = Loaded<SessionList>> + Send + 'static {
        #[cfg(feature = "ssr")]
        {
            let source = self.source.clone();
            async move {
                match source {
                    Some(s) => s.0.sessions().await,
                    None => Err(SIGNED_OUT.to_string()),
                }
            }
        }
        #[cfg(not(feature = "ssr"))]
        over_api(crate::api::LIST_SESSIONS.url(&[]))
    }

    /// The session's snapshot, superseded messages included (the page folds them away).
    pub fn session(
        &self,
        id: String,
    ) -> impl Future<Output = Loaded<SessionDetail>> + Send + 'static {
        #[cfg(feature = "ssr")]
        {
            let source = self.source.clone();
            async move {
                match source {
                    Some(s) => s.0.session(id).await,
                    None => Err(SIGNED_OUT.to_string()),
                }
            }
        }
        #[cfg(not(feature = "ssr"))]
        over_api(snapshot_url(&id))
    }
}

/// What a page rendered without the operator's cookie says (as the API's refusal does).
#[cfg(feature = "ssr")]
const SIGNED_OUT: &str = "Not signed in: open the URL that `mulligan serve` printed.";

/// The snapshot's URL: superseded messages included.
pub fn snapshot_url(id: &str) -> String {
    format!("{}?include_superseded=true", crate::api::SESSION.url(&[id]))
}

/// A GET over the API, as a future a resource can hold (the browser's fetch is not `Send`:
/// it is wrapped, and runs on the page's one thread).
#[cfg(not(feature = "ssr"))]
fn over_api<T: DeserializeOwned + 'static>(
    url: String,
) -> impl Future<Output = Loaded<T>> + Send + 'static {
    let fut = async move {
        crate::client::fetch_json::<T>("GET", &url, None)
            .await
            .map_err(|e| e.explain())
    };
    #[cfg(feature = "hydrate")]
    return send_wrapper::SendWrapper::new(Box::pin(fut));
    #[cfg(not(feature = "hydrate"))]
    fut
}

/// How a loaded value travels in the page: JSON, parsed in the browser by `JSON.parse` (see
/// [`crate::client::parse_json`]) rather than a second copy of serde_json's parser.
pub struct PageCodec;

impl<T: Serialize> Encoder<T> for PageCodec {
    type Error = String;
    type Encoded = String;

    fn encode(val: &T) -> Result<String, String> {
        // Only the server writes a page's data: the browser's bundle holds no serializer.
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

/// A resource holding a page's first data, written into the HTML by the server.
pub type PageResource<T> = Resource<Loaded<T>, PageCodec>;
