//! The typed API client for native programs (the CLI, the tests, the bench): one request per
//! call, `Authorization: Bearer`, the answer parsed as the endpoint's type, a refusal as the
//! contract's error. The browser has its own (fetch) in `crate::client`.
use super::{Endpoint, Method};
use crate::wire::ApiError;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::time::Duration;

/// An authenticated client of one server (`base`: `http://host:port`, no path).
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    token: String,
}

/// A 2xx answer: its status, its body as sent, and that body parsed.
#[derive(Clone, Debug)]
pub struct Answer<T> {
    pub status: u16,
    pub raw: String,
    pub value: T,
}

/// Why a call did not give the endpoint's answer.
#[derive(Debug)]
pub enum CallError {
    /// The server answered in the contract's error shape (4xx: refused; 5xx: failed).
    Api {
        status: u16,
        raw: String,
        error: ApiError,
    },
    /// The server answered something that is not the API's JSON (a 2xx of the wrong shape,
    /// or an error without the contract's body).
    Unexpected {
        status: u16,
        raw: String,
        why: String,
    },
    /// No answer: the connection failed (`connect`), timed out, or broke.
    Transport {
        connect: bool,
        timeout: bool,
        message: String,
    },
}

impl Client {
    /// A client of `base` with `token`; `timeout` bounds each call (`None`: no bound).
    pub fn new(base: &str, token: &str, timeout: Option<Duration>) -> Result<Client, String> {
        let mut builder = reqwest::Client::builder().connect_timeout(Duration::from_secs(10));
        if let Some(t) = timeout {
            builder = builder.timeout(t);
        }
        let http = builder
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
        Ok(Client {
            http,
            base: base.trim().trim_end_matches('/').to_string(),
            token: token.to_string(),
        })
    }

    /// The server's base URL, as given.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// The token this client sends.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The full URL of an endpoint path (see [`super::Route::url`]).
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Calls `endpoint` with its path `args` and `body` (sent as JSON when given).
    pub async fn call<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        endpoint: &Endpoint<Req, Resp>,
        args: &[&str],
        body: Option<&Req>,
    ) -> Result<Answer<Resp>, CallError> {
        self.call_with_query(endpoint, args, &[], body).await
    }

    /// [`Client::call`] with a query string (`query`'s pairs, encoded).
    pub async fn call_with_query<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        endpoint: &Endpoint<Req, Resp>,
        args: &[&str],
        query: &[(&str, &str)],
        body: Option<&Req>,
    ) -> Result<Answer<Resp>, CallError> {
        let url = self.url(&endpoint.url(args));
        let method = match endpoint.route.method {
            Method::Get => reqwest::Method::GET,
            Method::Post => reqwest::Method::POST,
            Method::Patch => reqwest::Method::PATCH,
            Method::Delete => reqwest::Method::DELETE,
        };
        let mut req = self.http.request(method, &url).bearer_auth(&self.token);
        if !query.is_empty() {
            req = req.query(query);
        }
        if let Some(b) = body {
            req = req.json(b);
        }
        let resp = req.send().await.map_err(transport)?;
        let status = resp.status().as_u16();
        let raw = resp.text().await.map_err(transport)?;
        if (200..300).contains(&status) {
            return match serde_json::from_str::<Resp>(&raw) {
                Ok(value) => Ok(Answer { status, raw, value }),
                Err(e) => Err(CallError::Unexpected {
                    status,
                    raw,
                    why: format!("the answer has an unexpected shape: {e}"),
                }),
            };
        }
        match serde_json::from_str::<ApiError>(&raw) {
            Ok(error) => Err(CallError::Api { status, raw, error }),
            Err(_) => Err(CallError::Unexpected {
                status,
                raw,
                why: "the answer is not the API's error".into(),
            }),
        }
    }
}

fn transport(e: reqwest::Error) -> CallError {
    CallError::Transport {
        connect: e.is_connect(),
        timeout: e.is_timeout(),
        message: root_cause(&e),
    }
}

/// The innermost error of a chain ("Connection refused", not "error sending request").
pub fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string()
}
