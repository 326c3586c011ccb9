//! The `openai` provider: the Chat Completions streaming API of any compatible server
//! (OpenAI, vLLM, llama.cpp, Ollama, and Mulligan's own demo endpoint).
use super::{ChatRequest, DeltaStream, Limits, Provider, ProviderError, StreamItem};
use futures::future::BoxFuture;

pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

pub struct OpenAi {
    client: reqwest::Client,
    url: String,
    api_key: Option<String>,
    requires_key: bool,
    limits: Limits,
}

impl OpenAi {
    /// `requires_key`: fail as `credentials_unresolved` without a key instead of calling.
    pub fn new(
        client: reqwest::Client,
        base_url: &str,
        api_key: Option<String>,
        requires_key: bool,
        limits: Limits,
    ) -> Self {
        OpenAi {
            client,
            url: format!("{}/chat/completions", base_url.trim_end_matches('/')),
            api_key: api_key.filter(|k| !k.is_empty()),
            requires_key,
            limits,
        }
    }
}

impl Provider for OpenAi {
    fn open(&self, req: ChatRequest) -> BoxFuture<'_, Result<DeltaStream, ProviderError>> {
        Box::pin(async move {
            if self.requires_key && self.api_key.is_none() {
                return Err(ProviderError::NoCredentials);
            }
            let body = serde_json::json!({
                "model": req.model,
                "messages": req.messages,
                "stream": true,
                "stream_options": {"include_usage": true},
            });
            let mut call = self.client.post(&self.url).json(&body);
            if let Some(key) = &self.api_key {
                call = call.bearer_auth(key);
            }
            let resp = super::sse::send(call, &self.limits).await?;
            if !resp.status().is_success() {
                return Err(super::sse::answer_error(resp, &self.limits).await.0);
            }
            Ok(parse_stream(resp, &self.limits))
        })
    }
}

/// Turns a 2xx SSE body into stream items; ends after `[DONE]`, cut if it ends before.
fn parse_stream(resp: reqwest::Response, limits: &Limits) -> DeltaStream {
    super::sse::item_stream(resp, "[DONE]", limits, |_event, data| {
        match chunk_items(data)? {
            ChunkItems::Done => Ok(vec![StreamItem::Done]),
            ChunkItems::Items(items) => Ok(items),
        }
    })
}

enum ChunkItems {
    Done,
    Items(Vec<StreamItem>),
}

/// The fields of a Chat Completions chunk Mulligan reads, borrowed from the payload where
/// it can be (one typed parse per chunk, no intermediate JSON tree).
#[derive(serde::Deserialize)]
struct Chunk<'a> {
    #[serde(default, borrow)]
    choices: Option<Vec<Choice<'a>>>,
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    error: Option<serde::de::IgnoredAny>,
}

#[derive(serde::Deserialize)]
struct Choice<'a> {
    #[serde(default, borrow)]
    delta: Option<ChoiceDelta<'a>>,
}

#[derive(serde::Deserialize)]
struct ChoiceDelta<'a> {
    #[serde(default, borrow)]
    content: Option<std::borrow::Cow<'a, str>>,
}

#[derive(serde::Deserialize)]
struct Usage {
    #[serde(default)]
    total_tokens: Option<u64>,
}

/// Parses one `data:` payload of a Chat Completions stream.
fn chunk_items(data: &str) -> Result<ChunkItems, ProviderError> {
    let data = data.trim();
    if data == "[DONE]" {
        return Ok(ChunkItems::Done);
    }
    let chunk: Chunk = serde_json::from_str(data).map_err(|e| ProviderError::StreamCut {
        message: super::limits::error_text(&format!("unreadable chunk: {e}")),
    })?;
    if chunk.error.is_some() {
        return Err(super::sse::stream_error(data));
    }
    let mut items = Vec::new();
    if let Some(text) = chunk
        .choices
        .into_iter()
        .flatten()
        .next()
        .and_then(|c| c.delta)
        .and_then(|d| d.content)
    {
        if !text.is_empty() {
            items.push(StreamItem::Delta(text.into_owned()));
        }
    }
    if let Some(total) = chunk.usage.and_then(|u| u.total_tokens) {
        items.push(StreamItem::Usage {
            total_tokens: super::limits::tokens(total),
        });
    }
    Ok(ChunkItems::Items(items))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_yield_deltas_usage_and_done() {
        let ChunkItems::Items(items) =
            chunk_items(r#"{"choices":[{"delta":{"content":"Hel"}}]}"#).unwrap()
        else {
            panic!("expected items")
        };
        assert_eq!(items, vec![StreamItem::Delta("Hel".into())]);
        let ChunkItems::Items(items) =
            chunk_items(r#"{"choices":[],"usage":{"total_tokens":12}}"#).unwrap()
        else {
            panic!("expected items")
        };
        assert_eq!(items, vec![StreamItem::Usage { total_tokens: 12 }]);
        assert!(matches!(chunk_items(" [DONE] "), Ok(ChunkItems::Done)));
        // Escapes are decoded; fields Mulligan does not read are skipped.
        let ChunkItems::Items(items) = chunk_items(
            r#"{"id":"x","choices":[{"index":0,"delta":{"role":"assistant","content":"a\"b\n"},"finish_reason":null}],"usage":null}"#,
        )
        .unwrap() else {
            panic!("expected items")
        };
        assert_eq!(items, vec![StreamItem::Delta("a\"b\n".into())]);
        assert!(matches!(
            chunk_items("{not json"),
            Err(ProviderError::StreamCut { .. })
        ));
    }

    #[test]
    fn an_error_chunk_is_a_provider_error() {
        let err = chunk_items(r#"{"error":{"type":"overloaded_error","message":"busy"}}"#);
        assert!(
            matches!(err, Err(ProviderError::Status { error_type: Some(t), .. }) if t == "overloaded_error")
        );
    }
}
