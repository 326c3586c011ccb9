//! rmcp's streamable HTTP client on the workspace's reqwest (one HTTP and TLS stack), with
//! every body and SSE event bounded.
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use reqwest::header::{HeaderName, HeaderValue, ACCEPT, CONTENT_TYPE};
use reqwest::StatusCode;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::common::http_header::{
    EVENT_STREAM_MIME_TYPE, HEADER_LAST_EVENT_ID, HEADER_SESSION_ID, JSON_MIME_TYPE,
};
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

type Error = StreamableHttpError<reqwest::Error>;
type SseEvents = BoxStream<'static, Result<sse_stream::Sse, SseError>>;

/// How much of an error body is kept for the message.
const ERROR_PREVIEW: usize = 512;

/// A reqwest client that speaks MCP's streamable HTTP.
#[derive(Clone)]
pub struct Http(pub reqwest::Client);

fn client_err(e: reqwest::Error) -> Error {
    StreamableHttpError::Client(e.without_url())
}

fn media_type_is(value: &HeaderValue, expected: &str) -> bool {
    value
        .to_str()
        .ok()
        .and_then(|v| v.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case(expected))
}

fn request(
    mut builder: reqwest::RequestBuilder,
    session_id: Option<&str>,
    auth: Option<String>,
    headers: HashMap<HeaderName, HeaderValue>,
) -> reqwest::RequestBuilder {
    builder = builder.header(
        ACCEPT,
        format!("{EVENT_STREAM_MIME_TYPE}, {JSON_MIME_TYPE}"),
    );
    for (name, value) in headers {
        builder = builder.header(name, value);
    }
    if let Some(auth) = auth {
        builder = builder.bearer_auth(auth);
    }
    if let Some(id) = session_id {
        builder = builder.header(HEADER_SESSION_ID, id);
    }
    builder
}

/// Reads at most `limit` bytes of a body; `None` when it is longer.
async fn read_bounded(
    response: reqwest::Response,
    limit: usize,
) -> Result<Option<Vec<u8>>, reqwest::Error> {
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        if body.len().saturating_add(chunk.len()) > limit {
            return Ok(None);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Some(body))
}

/// A short, printable prefix of an error body.
async fn preview(response: reqwest::Response) -> String {
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(Ok(chunk)) = stream.next().await {
        body.extend_from_slice(&chunk);
        if body.len() >= ERROR_PREVIEW {
            break;
        }
    }
    body.truncate(ERROR_PREVIEW);
    String::from_utf8_lossy(&body)
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect::<String>()
        .trim()
        .to_string()
}

async fn status_error(response: reqwest::Response) -> Error {
    let status = response.status();
    let hint = match status {
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
            " (the server wants credentials: set them in the server's \"headers\")"
        }
        StatusCode::NOT_FOUND => " (is the URL the server's MCP endpoint, often ending in /mcp?)",
        _ => "",
    };
    let body = preview(response).await;
    StreamableHttpError::UnexpectedServerResponse(Cow::Owned(format!(
        "HTTP {status}{hint}: {body}"
    )))
}

/// Splits a byte stream into SSE events, failing once an event grows past `max` bytes.
fn sse_events<S>(bytes: S, max: usize) -> SseEvents
where
    S: Stream<Item = Result<bytes::Bytes, reqwest::Error>> + Send + 'static,
{
    let mut in_event = 0usize;
    let mut line_empty = true;
    let bounded = bytes.map(move |chunk| {
        let chunk = chunk.map_err(|e| std::io::Error::other(e.without_url()))?;
        for &b in chunk.iter() {
            match b {
                b'\n' => {
                    if line_empty {
                        in_event = 0;
                    }
                    line_empty = true;
                }
                b'\r' => {}
                _ => line_empty = false,
            }
            in_event = in_event.saturating_add(1);
            if in_event > max {
                return Err(std::io::Error::other(format!(
                    "an SSE event from the server is larger than {max} bytes"
                )));
            }
        }
        Ok(chunk)
    });
    sse_stream::SseStream::from_bytes_stream(bounded).boxed()
}

impl StreamableHttpClient for Http {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, Error> {
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            StreamableHttpResponseLimits::default(),
        )
        .await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, Error> {
        let mut limits = StreamableHttpResponseLimits::default();
        limits.max_sse_event_size = max_sse_event_size;
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            limits,
        )
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, Error> {
        let had_session = session_id.is_some();
        let builder = request(
            self.0.post(uri.as_ref()),
            session_id.as_deref(),
            auth_header,
            custom_headers,
        );
        let response = builder.json(&message).send().await.map_err(client_err)?;
        let status = response.status();
        if matches!(status, StatusCode::ACCEPTED | StatusCode::NO_CONTENT) {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        if status == StatusCode::NOT_FOUND && had_session {
            return Err(StreamableHttpError::SessionExpired);
        }
        let awaits_no_response = !matches!(message, ClientJsonRpcMessage::Request(_));
        let content_type = response.headers().get(CONTENT_TYPE).cloned();
        let is_json = content_type
            .as_ref()
            .is_some_and(|ct| media_type_is(ct, JSON_MIME_TYPE));
        let new_session = response
            .headers()
            .get(HEADER_SESSION_ID)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        if !status.is_success() {
            // A JSON-RPC error in a failure response is the server's answer.
            if is_json {
                let Some(body) = read_bounded(response, limits.max_json_response_size)
                    .await
                    .map_err(client_err)?
                else {
                    return Err(StreamableHttpError::UnexpectedServerResponse(Cow::Owned(
                        format!("HTTP {status} with an oversized body"),
                    )));
                };
                if let Ok(msg @ ServerJsonRpcMessage::Error(_)) = serde_json::from_slice(&body) {
                    return Ok(StreamableHttpPostResponse::Json(msg, new_session));
                }
                let shown =
                    String::from_utf8_lossy(&body[..body.len().min(ERROR_PREVIEW)]).into_owned();
                return Err(StreamableHttpError::UnexpectedServerResponse(Cow::Owned(
                    format!("HTTP {status}: {shown}"),
                )));
            }
            return Err(status_error(response).await);
        }
        if awaits_no_response {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        match content_type {
            Some(ct) if media_type_is(&ct, EVENT_STREAM_MIME_TYPE) => {
                Ok(StreamableHttpPostResponse::Sse(
                    sse_events(response.bytes_stream(), limits.max_sse_event_size),
                    new_session,
                ))
            }
            Some(_) if is_json => {
                let Some(body) = read_bounded(response, limits.max_json_response_size)
                    .await
                    .map_err(client_err)?
                else {
                    return Err(StreamableHttpError::ResponseBodyTooLarge {
                        max_size: limits.max_json_response_size,
                    });
                };
                let msg = serde_json::from_slice(&body)?;
                Ok(StreamableHttpPostResponse::Json(msg, new_session))
            }
            other => Err(StreamableHttpError::UnexpectedContentType(other.map(|v| {
                String::from_utf8_lossy(v.as_bytes())
                    .chars()
                    .take(100)
                    .collect()
            }))),
        }
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), Error> {
        let builder = request(
            self.0.delete(uri.as_ref()),
            Some(&session_id),
            auth_header,
            custom_headers,
        );
        let response = builder.send().await.map_err(client_err)?;
        if response.status() == StatusCode::METHOD_NOT_ALLOWED || response.status().is_success() {
            return Ok(());
        }
        Err(status_error(response).await)
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<SseEvents, Error> {
        self.get_stream_with_max_sse_event_size(
            uri,
            session_id,
            last_event_id,
            auth_header,
            custom_headers,
            StreamableHttpResponseLimits::default().max_sse_event_size,
        )
        .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<SseEvents, Error> {
        let mut builder = request(
            self.0.get(uri.as_ref()),
            session_id.as_deref(),
            auth_header,
            custom_headers,
        );
        if let Some(id) = last_event_id {
            builder = builder.header(HEADER_LAST_EVENT_ID, id);
        }
        let response = builder.send().await.map_err(client_err)?;
        if response.status() == StatusCode::METHOD_NOT_ALLOWED {
            return Err(StreamableHttpError::ServerDoesNotSupportSse);
        }
        if !response.status().is_success() {
            return Err(status_error(response).await);
        }
        match response.headers().get(CONTENT_TYPE) {
            Some(ct) if media_type_is(ct, EVENT_STREAM_MIME_TYPE) => {
                Ok(sse_events(response.bytes_stream(), max_sse_event_size))
            }
            other => Err(StreamableHttpError::UnexpectedContentType(other.map(|v| {
                String::from_utf8_lossy(v.as_bytes())
                    .chars()
                    .take(100)
                    .collect()
            }))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_oversized_sse_event_ends_the_stream_with_an_error() {
        let chunks: Vec<Result<bytes::Bytes, reqwest::Error>> = vec![
            Ok(bytes::Bytes::from_static(b"data: small\n\n")),
            Ok(bytes::Bytes::from(format!("data: {}\n\n", "x".repeat(200)))),
        ];
        let mut events = sse_events(futures::stream::iter(chunks), 64);
        let first = events.next().await.unwrap().unwrap();
        assert_eq!(first.data.as_deref(), Some("small"));
        assert!(events.next().await.unwrap().is_err());
    }

    #[test]
    fn media_types_match_their_essence() {
        let v = HeaderValue::from_static("Application/JSON; charset=utf-8");
        assert!(media_type_is(&v, JSON_MIME_TYPE));
        assert!(!media_type_is(&v, EVENT_STREAM_MIME_TYPE));
    }
}
