//! The `openai` provider: the Chat Completions streaming API of any compatible server
//! (OpenAI, vLLM, llama.cpp, Ollama, and Mulligan's own demo endpoint).
use super::tool_calls::{Fragment, OpenAiCalls};
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
            let body = Body {
                model: &req.model,
                messages: &req.messages,
                stream: true,
                stream_options: StreamOptions {
                    include_usage: true,
                },
                tools: req.tools.iter().map(Tool::of).collect(),
            };
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

/// A Chat Completions request, serialized straight from the run's request (no JSON tree in
/// between).
#[derive(serde::Serialize)]
struct Body<'a> {
    model: &'a str,
    messages: &'a [super::ChatMessage],
    stream: bool,
    stream_options: StreamOptions,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<Tool<'a>>,
}

#[derive(serde::Serialize)]
struct StreamOptions {
    include_usage: bool,
}

/// `{"type": "function", "function": {name, description, parameters}}`.
#[derive(serde::Serialize)]
struct Tool<'a> {
    r#type: &'static str,
    function: Function<'a>,
}

#[derive(serde::Serialize)]
struct Function<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a serde_json::Value,
}

impl<'a> Tool<'a> {
    fn of(t: &'a super::Offered) -> Tool<'a> {
        Tool {
            r#type: "function",
            function: Function {
                name: &t.model_name,
                description: t.description(),
                parameters: t.input_schema(),
            },
        }
    }
}

/// Turns a 2xx SSE body into stream items; ends after `[DONE]`, cut if it ends before. Tool
/// call fragments are assembled across chunks and yielded whole just before `Done`.
fn parse_stream(resp: reqwest::Response, limits: &Limits) -> DeltaStream {
    let mut calls = Some(OpenAiCalls::default());
    super::sse::item_stream(resp, "[DONE]", limits, move |_event, data| {
        let Some(assembling) = calls.as_mut() else {
            return Ok(Vec::new());
        };
        match chunk_items(data, assembling)? {
            ChunkItems::Done => {
                let mut items = Vec::with_capacity(2);
                if let Some(done) = calls.take().filter(|c| !c.is_empty()) {
                    items.push(StreamItem::ToolCalls(done.finish(0)));
                }
                items.push(StreamItem::Done);
                Ok(items)
            }
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
    #[serde(default, borrow)]
    tool_calls: Option<Vec<CallFragment<'a>>>,
    #[serde(default, borrow)]
    function_call: Option<FunctionFragment<'a>>,
}

#[derive(serde::Deserialize)]
struct CallFragment<'a> {
    #[serde(default)]
    index: Option<u32>,
    #[serde(default, borrow)]
    id: Option<std::borrow::Cow<'a, str>>,
    #[serde(default, borrow)]
    function: Option<FunctionFragment<'a>>,
}

#[derive(serde::Deserialize)]
struct FunctionFragment<'a> {
    #[serde(default, borrow)]
    name: Option<std::borrow::Cow<'a, str>>,
    #[serde(default, borrow)]
    arguments: Option<std::borrow::Cow<'a, str>>,
}

#[derive(serde::Deserialize)]
struct Usage {
    #[serde(default, deserialize_with = "count_or_none")]
    total_tokens: Option<u64>,
}

/// A token count as sent, or `None` for anything that is not one (negative, a float, text):
/// a provider's odd `usage` is ignored, never a reason to fail the reply.
fn count_or_none<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum Count {
        Whole(u64),
        Other(serde::de::IgnoredAny),
    }
    Ok(
        match <Option<Count> as serde::Deserialize>::deserialize(d)? {
            Some(Count::Whole(n)) => Some(n),
            _ => None,
        },
    )
}

/// Parses one `data:` payload of a Chat Completions stream; tool call fragments go to `calls`.
fn chunk_items(data: &str, calls: &mut OpenAiCalls) -> Result<ChunkItems, ProviderError> {
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
    if let Some(delta) = chunk
        .choices
        .into_iter()
        .flatten()
        .next()
        .and_then(|c| c.delta)
    {
        if let Some(text) = delta.content.filter(|t| !t.is_empty()) {
            items.push(StreamItem::Delta(text.into_owned()));
        }
        for f in delta.tool_calls.into_iter().flatten() {
            let function = f.function.as_ref();
            calls.absorb(Fragment {
                index: f.index,
                id: f.id.as_deref(),
                name: function.and_then(|x| x.name.as_deref()),
                arguments: function.and_then(|x| x.arguments.as_deref()),
            })?;
        }
        if let Some(f) = &delta.function_call {
            calls.absorb_legacy(Fragment {
                index: None,
                id: None,
                name: f.name.as_deref(),
                arguments: f.arguments.as_deref(),
            })?;
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
    fn the_request_body_is_the_chat_completions_shape() {
        let list = std::sync::Arc::new(vec![app::wire::ToolInfo {
            name: "list".into(),
            description: Some("Lists.".into()),
            input_schema: serde_json::json!({"type": "object"}),
            read_only: None,
            destructive: None,
            idempotent: None,
            open_world: None,
        }]);
        let offered = super::super::Offered::new("mulligan__list".into(), "mulligan", list, 0);
        let messages = [super::super::ChatMessage::text("user", "hi")];
        let body = |offered: &[super::super::Offered]| {
            serde_json::to_value(Body {
                model: "m",
                messages: &messages,
                stream: true,
                stream_options: StreamOptions {
                    include_usage: true,
                },
                tools: offered.iter().map(Tool::of).collect(),
            })
            .unwrap()
        };
        assert_eq!(
            body(&[offered.unwrap()]),
            serde_json::json!({
                "model": "m",
                "messages": [{"role": "user", "content": "hi"}],
                "stream": true,
                "stream_options": {"include_usage": true},
                "tools": [{"type": "function", "function": {
                    "name": "mulligan__list", "description": "Lists.",
                    "parameters": {"type": "object"},
                }}],
            })
        );
        // No tools: no `tools` key (some providers refuse an empty list).
        assert!(body(&[]).get("tools").is_none());
    }

    fn chunk_items_(data: &str) -> Result<ChunkItems, ProviderError> {
        chunk_items(data, &mut OpenAiCalls::default())
    }

    #[test]
    fn tool_call_fragments_assemble_across_chunks() {
        let mut calls = OpenAiCalls::default();
        for data in [
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"fs__write_file","arguments":""}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"path\":"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"a.txt\"}"}}]}}]}"#,
        ] {
            chunk_items(data, &mut calls).unwrap();
        }
        let done = calls.finish(0);
        assert_eq!(done.len(), 1);
        assert_eq!(done[0].id, "call_1");
        assert_eq!(done[0].name, "fs__write_file");
        assert_eq!(done[0].arguments, r#"{"path":"a.txt"}"#);
    }

    #[test]
    fn chunks_yield_deltas_usage_and_done() {
        let ChunkItems::Items(items) =
            chunk_items_(r#"{"choices":[{"delta":{"content":"Hel"}}]}"#).unwrap()
        else {
            panic!("expected items")
        };
        assert_eq!(items, vec![StreamItem::Delta("Hel".into())]);
        let ChunkItems::Items(items) =
            chunk_items_(r#"{"choices":[],"usage":{"total_tokens":12}}"#).unwrap()
        else {
            panic!("expected items")
        };
        assert_eq!(items, vec![StreamItem::Usage { total_tokens: 12 }]);
        for odd in ["-5", "1.5", "\"many\"", "null", "{}"] {
            let chunk = format!(r#"{{"choices":[],"usage":{{"total_tokens":{odd}}}}}"#);
            let ChunkItems::Items(items) = chunk_items_(&chunk).expect("odd usage is ignored")
            else {
                panic!("items");
            };
            assert!(items.is_empty(), "{odd}: {items:?}");
        }
        assert!(matches!(chunk_items_(" [DONE] "), Ok(ChunkItems::Done)));
        // Escapes are decoded; fields Mulligan does not read are skipped.
        let ChunkItems::Items(items) = chunk_items_(
            r#"{"id":"x","choices":[{"index":0,"delta":{"role":"assistant","content":"a\"b\n"},"finish_reason":null}],"usage":null}"#,
        )
        .unwrap() else {
            panic!("expected items")
        };
        assert_eq!(items, vec![StreamItem::Delta("a\"b\n".into())]);
        assert!(matches!(
            chunk_items_("{not json"),
            Err(ProviderError::StreamCut { .. })
        ));
    }

    #[test]
    fn an_error_chunk_is_a_provider_error() {
        let err = chunk_items_(r#"{"error":{"type":"overloaded_error","message":"busy"}}"#);
        assert!(
            matches!(err, Err(ProviderError::Status { error_type: Some(t), .. }) if t == "overloaded_error")
        );
    }
}
