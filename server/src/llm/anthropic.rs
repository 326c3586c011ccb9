//! The `anthropic` provider: the Anthropic Messages streaming API (`POST {base}/messages`).
use super::tool_calls::AnthropicCalls;
use super::{ChatRequest, DeltaStream, Limits, Provider, ProviderError, RetryAfter, StreamItem};
use futures::future::BoxFuture;
use reqwest::header::{HeaderMap, HeaderValue};

pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com/v1";
const API_VERSION: &str = "2023-06-01";
const MAX_TOKENS: u32 = 4096;

pub struct Anthropic {
    client: reqwest::Client,
    url: String,
    api_key: Option<String>,
    limits: Limits,
}

impl Anthropic {
    pub fn new(
        client: reqwest::Client,
        base_url: &str,
        api_key: Option<String>,
        limits: Limits,
    ) -> Self {
        Anthropic {
            client,
            url: format!("{}/messages", base_url.trim_end_matches('/')),
            api_key: api_key.filter(|k| !k.is_empty()),
            limits,
        }
    }
}

impl Provider for Anthropic {
    fn open(&self, req: ChatRequest) -> BoxFuture<'_, Result<DeltaStream, ProviderError>> {
        Box::pin(async move {
            // Marked sensitive (like reqwest's bearer_auth) so it never shows in debug output.
            let key = self.api_key.as_deref().map(HeaderValue::from_str);
            let Some(Ok(mut key)) = key else {
                return Err(ProviderError::NoCredentials);
            };
            key.set_sensitive(true);
            let call = self
                .client
                .post(&self.url)
                .header("x-api-key", key)
                .header("anthropic-version", API_VERSION)
                .json(&request_body(&req));
            let resp = super::sse::send(call, &self.limits).await?;
            let status = resp.status();
            if !status.is_success() {
                let (mut err, headers) = super::sse::answer_error(resp, &self.limits).await;
                if let ProviderError::Status { retry_after, .. } = &mut err {
                    if retry_after.is_none() && status.as_u16() == 429 {
                        let now = crate::clock::now_ms();
                        *retry_after = reset_after(&headers, now)
                            .map(|at| RetryAfter::At(self.limits.clamp_until(at, now)));
                    }
                }
                return Err(err);
            }
            Ok(parse_stream(resp, &self.limits))
        })
    }
}

/// The Messages request: `system` messages go to the top-level field; an assistant's tool
/// calls become `tool_use` blocks and `tool` results `tool_result` blocks of a user turn;
/// consecutive turns of one role are merged and empty text dropped (the API rejects empty
/// text blocks). A turn of text only is sent as a plain string.
fn request_body(req: &ChatRequest) -> serde_json::Value {
    use serde_json::{json, Value};
    let mut system: Vec<&str> = Vec::new();
    let mut turns: Vec<(&str, Vec<Value>)> = Vec::new();
    for m in req.messages.iter() {
        let (role, mut blocks) = match m.role.as_str() {
            "system" => {
                system.push(&m.content);
                continue;
            }
            "tool" => (
                "user",
                vec![json!({
                    "type": "tool_result",
                    "tool_use_id": m.tool_call_id.as_deref().unwrap_or_default(),
                    "content": m.content,
                })],
            ),
            role => {
                let role = if role == "assistant" {
                    "assistant"
                } else {
                    "user"
                };
                let mut blocks = Vec::new();
                if !m.content.trim().is_empty() {
                    blocks.push(json!({"type": "text", "text": m.content}));
                }
                for c in &m.tool_calls {
                    let input = serde_json::from_str::<Value>(&c.function.arguments)
                        .ok()
                        .filter(Value::is_object)
                        .unwrap_or_else(|| json!({}));
                    blocks.push(json!({
                        "type": "tool_use", "id": c.id, "name": c.function.name, "input": input,
                    }));
                }
                (role, blocks)
            }
        };
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((r, content)) if *r == role => content.append(&mut blocks),
            _ => turns.push((role, blocks)),
        }
    }
    let messages: Vec<_> = turns
        .into_iter()
        .map(|(role, blocks)| {
            let texts: Option<Vec<&str>> = blocks
                .iter()
                .map(|b| (b["type"] == "text").then(|| b["text"].as_str()).flatten())
                .collect();
            match texts {
                Some(texts) => json!({"role": role, "content": texts.join("\n\n")}),
                None => json!({"role": role, "content": blocks}),
            }
        })
        .collect();
    let mut body = json!({
        "model": req.model,
        "max_tokens": MAX_TOKENS,
        "stream": true,
        "messages": messages,
    });
    let system: Vec<&str> = system
        .into_iter()
        .filter(|s| !s.trim().is_empty())
        .collect();
    if !system.is_empty() {
        body["system"] = system.join("\n\n").into();
    }
    if !req.tools.is_empty() {
        body["tools"] = req
            .tools
            .iter()
            .map(|t| json!({"name": t.model_name, "description": t.description(), "input_schema": t.input_schema()}))
            .collect();
    }
    body
}

/// Turns a 2xx SSE body into stream items; ends after `message_stop`, cut if it ends before.
fn parse_stream(resp: reqwest::Response, limits: &Limits) -> DeltaStream {
    let mut usage = UsageState::default();
    super::sse::item_stream(resp, "message_stop", limits, move |event, data| {
        event_items(event, data, &mut usage)
    })
}

/// Token counts seen so far in one stream, and whether `message_stop` arrived.
#[derive(Debug, Default)]
struct UsageState {
    input_tokens: u64,
    output_tokens: u64,
    done: bool,
    /// `tool_use` blocks being assembled.
    calls: AnthropicCalls,
}

impl UsageState {
    /// Input counts include prompt-cache reads and writes; Anthropic reports them apart.
    fn absorb(&mut self, usage: Option<&serde_json::Value>) {
        let Some(u) = usage else { return };
        let n = |k: &str| u.get(k).and_then(|x| x.as_u64()).map(super::limits::tokens);
        let keys = [
            "input_tokens",
            "cache_creation_input_tokens",
            "cache_read_input_tokens",
        ];
        if keys.iter().any(|k| n(k).is_some()) {
            self.input_tokens = keys
                .iter()
                .filter_map(|k| n(k))
                .fold(0, u64::saturating_add);
        }
        if let Some(out) = n("output_tokens") {
            self.output_tokens = out; // cumulative in both message_start and message_delta
        }
    }
}

/// Parses one SSE event of a Messages stream. Unknown events (and `ping`) yield nothing.
fn event_items(
    event_name: &str,
    data: &str,
    state: &mut UsageState,
) -> Result<Vec<StreamItem>, ProviderError> {
    if event_name == "ping" || data.trim().is_empty() {
        return Ok(Vec::new());
    }
    let v: serde_json::Value =
        serde_json::from_str(data).map_err(|e| ProviderError::StreamCut {
            message: super::limits::error_text(&format!("unreadable event: {e}")),
        })?;
    // Without an `event:` line the name defaults to "message"; the payload's `type` says it too.
    let kind = match event_name {
        "" | "message" => v.get("type").and_then(|t| t.as_str()).unwrap_or(""),
        name => name,
    };
    Ok(match kind {
        "message_start" => {
            state.absorb(v.pointer("/message/usage"));
            Vec::new()
        }
        "content_block_delta" if v.pointer("/delta/type") == Some(&"text_delta".into()) => {
            match v.pointer("/delta/text").and_then(|t| t.as_str()) {
                Some(text) if !text.is_empty() => vec![StreamItem::Delta(text.to_string())],
                _ => Vec::new(),
            }
        }
        "content_block_start" if v.pointer("/content_block/type") == Some(&"tool_use".into()) => {
            let text = |p: &str| v.pointer(p).and_then(|t| t.as_str()).unwrap_or_default();
            let input = v
                .pointer("/content_block/input")
                .map(|i| i.to_string())
                .unwrap_or_default();
            state.calls.start(
                block_index(&v),
                text("/content_block/id"),
                text("/content_block/name"),
                &input,
            )?;
            Vec::new()
        }
        "content_block_delta" if v.pointer("/delta/type") == Some(&"input_json_delta".into()) => {
            let json = v.pointer("/delta/partial_json").and_then(|t| t.as_str());
            state
                .calls
                .delta(block_index(&v), json.unwrap_or_default())?;
            Vec::new()
        }
        "content_block_stop" => {
            state.calls.stop(block_index(&v));
            Vec::new()
        }
        "message_delta" => {
            state.absorb(v.get("usage"));
            Vec::new()
        }
        "message_stop" => {
            state.done = true;
            let mut items = Vec::with_capacity(3);
            let calls = std::mem::take(&mut state.calls).finish(0);
            if !calls.is_empty() {
                items.push(StreamItem::ToolCalls(calls));
            }
            items.push(StreamItem::Usage {
                total_tokens: super::limits::tokens(
                    state.input_tokens.saturating_add(state.output_tokens),
                ),
            });
            items.push(StreamItem::Done);
            items
        }
        "error" => return Err(super::sse::stream_error(data)),
        _ => Vec::new(),
    })
}

/// A content block event's `index` (0 when absent).
fn block_index(v: &serde_json::Value) -> u64 {
    v.get("index").and_then(|i| i.as_u64()).unwrap_or(0)
}

/// The advised wait from `anthropic-ratelimit-*-reset` (RFC 3339) on a 429 without
/// `Retry-After`: the latest reset of the exhausted limits (`*-remaining: 0`), else the
/// earliest reset given. Resets not after `now_ms` are ignored.
fn reset_after(headers: &HeaderMap, now_ms: i64) -> Option<i64> {
    let get = |name: String| headers.get(name).and_then(|v| v.to_str().ok());
    let resets: Vec<(bool, i64)> = ["requests", "tokens", "input-tokens", "output-tokens"]
        .iter()
        .filter_map(|kind| {
            let at = parse_rfc3339_ms(get(format!("anthropic-ratelimit-{kind}-reset"))?)?;
            let remaining = get(format!("anthropic-ratelimit-{kind}-remaining"));
            Some((remaining.map(str::trim) == Some("0"), at))
        })
        .filter(|&(_, at)| at > now_ms)
        .collect();
    let exhausted = resets.iter().filter(|r| r.0).map(|r| r.1).max();
    exhausted.or_else(|| resets.iter().map(|r| r.1).min())
}

/// `YYYY-MM-DDTHH:MM:SS[.frac]Z` (the form Anthropic sends) to epoch millis.
fn parse_rfc3339_ms(s: &str) -> Option<i64> {
    let s = s.trim().strip_suffix(['Z', 'z'])?;
    let (main, frac) = s.split_once('.').unwrap_or((s, "0"));
    let b = main.as_bytes();
    let seps = [(4, b'-'), (7, b'-'), (10, b'T'), (13, b':'), (16, b':')];
    if b.len() != 19 || seps.iter().any(|&(i, c)| b[i].to_ascii_uppercase() != c) {
        return None;
    }
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|c| c.is_ascii_digit());
    let num = |r: std::ops::Range<usize>| main.get(r).filter(|t| digits(t))?.parse::<i64>().ok();
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !digits(frac) || !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 {
        return None;
    }
    let millis: i64 = format!("{:0<3}", &frac[..frac.len().min(3)]).parse().ok()?;
    // Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
    let y = if mo <= 2 { y - 1 } else { y };
    let (era, yoe) = (y.div_euclid(400), y.rem_euclid(400));
    let doy = (153 * ((mo + 9) % 12) + 2) / 5 + d - 1;
    let days = era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468;
    Some((days * 86_400 + h * 3600 + mi * 60 + sec) * 1000 + millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items(event: &str, data: &str, st: &mut UsageState) -> Vec<StreamItem> {
        event_items(event, data, st).unwrap()
    }

    #[test]
    fn text_deltas_and_usage_then_done() {
        let mut st = UsageState::default();
        let start = r#"{"type":"message_start","message":{"usage":{"input_tokens":25,"cache_read_input_tokens":100,"output_tokens":1}}}"#;
        let text = r#"{"type":"content_block_delta","delta":{"type":"text_delta","text":"Hel"}}"#;
        let json = r#"{"type":"content_block_delta","delta":{"type":"input_json_delta","partial_json":"{"}}"#;
        let end = r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":15}}"#;
        assert!(items("message_start", start, &mut st).is_empty());
        let hel = vec![StreamItem::Delta("Hel".into())];
        assert_eq!(items("content_block_delta", text, &mut st), hel);
        assert_eq!(items("message", text, &mut st), hel); // no `event:` line: the type decides
        assert!(items("content_block_delta", json, &mut st).is_empty());
        assert!(items("message_delta", end, &mut st).is_empty() && !st.done);
        let stop = items("message_stop", r#"{"type":"message_stop"}"#, &mut st);
        let usage = StreamItem::Usage { total_tokens: 140 }; // cache reads count as input
        assert_eq!(stop, vec![usage, StreamItem::Done]);
        assert!(st.done);
    }

    #[test]
    fn ping_and_unknown_events_are_ignored() {
        let mut st = UsageState::default();
        assert!(items("ping", r#"{"type": "ping"}"#, &mut st).is_empty());
        assert!(items("content_block_stop", r#"{"index":0}"#, &mut st).is_empty());
        assert!(items("something_new", r#"{"type":"something_new"}"#, &mut st).is_empty());
        assert!(!st.done);
        let bad = event_items("content_block_delta", "{nope", &mut st);
        assert!(matches!(bad, Err(ProviderError::StreamCut { .. })));
    }

    #[test]
    fn an_error_event_is_a_status_zero_provider_error() {
        let data = r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        let err = ProviderError::Status {
            status: 0,
            error_type: Some("overloaded_error".into()),
            error_code: None,
            message: "Overloaded".into(),
            retry_after: None,
            should_retry: None,
        };
        assert_eq!(
            event_items("error", data, &mut UsageState::default()),
            Err(err)
        );
    }

    #[test]
    fn system_messages_go_to_the_top_level_field() {
        let turns = [
            ("system", "Be brief."),
            ("user", "Hi"),
            ("user", "there"),
            ("assistant", ""),
            ("assistant", "Hello"),
        ];
        let messages = turns
            .iter()
            .map(|(r, c)| super::super::ChatMessage::text(r, *c));
        let req = ChatRequest {
            model: "claude-x".into(),
            messages: messages.collect(),
            tools: Default::default(),
        };
        let want = serde_json::json!({
            "model": "claude-x", "max_tokens": 4096, "stream": true, "system": "Be brief.",
            "messages": [{"role": "user", "content": "Hi\n\nthere"}, {"role": "assistant", "content": "Hello"}],
        });
        assert_eq!(request_body(&req), want);
        let bare = request_body(&ChatRequest {
            model: "m".into(),
            messages: Vec::new().into(),
            tools: Default::default(),
        });
        assert!(bare.get("system").is_none());
    }

    #[test]
    fn tool_use_blocks_assemble_and_tool_turns_convert() {
        let mut st = UsageState::default();
        let start = r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"fs__read","input":{}}}"#;
        let part = |j: &str| {
            serde_json::json!({"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":j}}).to_string()
        };
        assert!(items("content_block_start", start, &mut st).is_empty());
        items("content_block_delta", &part("{\"path\":"), &mut st);
        items("content_block_delta", &part("\"a\"}"), &mut st);
        items("content_block_stop", r#"{"index":1}"#, &mut st);
        let stop = items("message_stop", r#"{"type":"message_stop"}"#, &mut st);
        let StreamItem::ToolCalls(calls) = &stop[0] else {
            panic!("{stop:?}")
        };
        assert_eq!(
            (calls[0].id.as_str(), calls[0].name.as_str()),
            ("toolu_1", "fs__read")
        );
        assert_eq!(calls[0].arguments, r#"{"path":"a"}"#);

        use super::super::{ChatMessage, ChatToolCall};
        let mut asked = ChatMessage::text("assistant", "Reading.");
        asked.tool_calls = vec![ChatToolCall::new("toolu_1", "fs__read", r#"{"path":"a"}"#)];
        let mut result = ChatMessage::text("tool", "contents");
        result.tool_call_id = Some("toolu_1".into());
        let body = request_body(&ChatRequest {
            model: "m".into(),
            messages: vec![
                ChatMessage::text("user", "go"),
                asked,
                result,
                ChatMessage::text("user", "and?"),
            ]
            .into(),
            tools: Default::default(),
        });
        let m = &body["messages"];
        assert_eq!(m[1]["content"][1]["type"], "tool_use");
        assert_eq!(m[1]["content"][1]["input"]["path"], "a");
        assert_eq!(m[2]["role"], "user");
        assert_eq!(m[2]["content"][0]["type"], "tool_result");
        assert_eq!(m[2]["content"][0]["tool_use_id"], "toolu_1");
        assert_eq!(m[2]["content"][1]["text"], "and?");
    }

    #[test]
    fn rfc3339_times_parse_to_epoch_millis() {
        let ok = [
            ("1970-01-01T00:00:00Z", 0),
            ("2024-08-14T17:45:21Z", 1_723_657_521_000),
            ("2024-02-29T00:00:00.5Z", 1_709_164_800_500),
            ("2024-08-14T17:45:21.123456Z", 1_723_657_521_123),
        ];
        for (text, ms) in ok {
            assert_eq!(parse_rfc3339_ms(text), Some(ms), "{text}");
        }
        let bad = [
            "",
            "tomorrow",
            "2024-08-14",
            "2024-08-14T17:45:21",
            "2024-13-01T00:00:00Z",
            "2024-08-14T17:45:21.Z",
            "2024-08-14T19:45:21+02:00",
        ];
        for text in bad {
            assert_eq!(parse_rfc3339_ms(text), None, "{text}");
        }
    }

    #[test]
    fn reset_headers_give_an_absolute_retry_time() {
        let now = 1_723_657_500_000; // 2024-08-14T17:45:00Z
        let headers = |pairs: &[(&str, &str)]| -> HeaderMap {
            let name = |k: &str| format!("anthropic-ratelimit-{k}").parse().unwrap();
            pairs
                .iter()
                .map(|(k, v)| (name(k), v.parse().unwrap()))
                .collect()
        };
        let mut h = headers(&[
            ("requests-remaining", "10"),
            ("requests-reset", "2024-08-14T17:45:21Z"),
            ("tokens-remaining", "0"),
            ("tokens-reset", "2024-08-14T17:46:00Z"),
            ("input-tokens-reset", "2020-01-01T00:00:00Z"), // past: ignored
        ]);
        let at = |ms| Some(ms);
        assert_eq!(reset_after(&h, now), at(1_723_657_560_000)); // the exhausted limit
        h.remove("anthropic-ratelimit-tokens-remaining");
        assert_eq!(reset_after(&h, now), at(1_723_657_521_000)); // none exhausted: earliest
        assert_eq!(reset_after(&headers(&[]), now), None);
    }

    #[test]
    fn a_far_future_reset_is_clamped_to_the_longest_advised_wait() {
        let now = 1_723_657_500_000;
        let far: HeaderMap = [(
            "anthropic-ratelimit-requests-reset".parse().unwrap(),
            "9999-12-31T23:59:59.999999999Z".parse().unwrap(),
        )]
        .into_iter()
        .collect();
        let at = reset_after(&far, now).expect("a reset time");
        let limits = super::super::limits::Limits::default();
        let until = limits.clamp_until(at, now);
        assert_eq!(until - now, 24 * 3_600_000, "a day at most");
    }
}
