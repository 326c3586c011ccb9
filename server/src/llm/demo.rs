//! The built-in `demo` provider's endpoint: an OpenAI-compatible `/demo/v1/chat/completions`
//! served by Mulligan itself, streaming a deterministic reply at a human pace, and playing
//! named fault scenarios chosen by the model name.
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The fault scenarios, by model name, with what each plays.
pub const SCENARIOS: &[(&str, &str)] = &[
    (
        "demo",
        "healthy: streams a readable reply; a prompt `echo <text>` is answered with the text itself (Markdown and all), on every streaming scenario",
    ),
    ("demo-flaky", "503 twice for a conversation, then fine"),
    (
        "demo-overloaded",
        "always 529 overloaded; its fallback chain goes on to demo",
    ),
    (
        "demo-down",
        "always 529 overloaded, with no model to fall back to",
    ),
    (
        "demo-busy",
        "529 for a conversation's first three calls (one turn's Tier 1 attempts), then fine",
    ),
    ("demo-quota", "429 with Retry-After: 3000"),
    ("demo-drop", "cuts the stream after a few deltas"),
    ("demo-auth", "401 invalid API key"),
    (
        "demo-overflow",
        "context length exceeded once for a conversation, then fine",
    ),
    ("demo-long", "a long healthy reply (for cancel demos)"),
    (
        "demo-agent",
        "an agent turn: lists its sub-sessions with the built-in mulligan tool, then answers; a prompt `call <server>__<tool> {json}` asks for that tool instead",
    ),
    (
        "demo-agent-flaky",
        "like demo-agent, but the step after the tool call fails with 503: a retry continues the turn without calling the tool again",
    ),
    (
        "demo-agent-writes",
        "an agent turn that renames its own session with the built-in mulligan tool: a tool that changes something, so it asks for the operator's approval first",
    ),
];

/// Which demo agent plays a step.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Agent {
    /// Lists its sub-sessions (a read-only tool), then answers.
    Lists,
    /// The same, failing 503 on the step after the tool call.
    Flaky,
    /// Renames its own session (a tool that writes: it asks first).
    Writes,
}

#[derive(Clone)]
struct Demo {
    delta_every: Duration,
    /// Calls seen per (model, conversation), for the "n times, then fine" scenarios.
    calls: Arc<Mutex<Calls>>,
}

/// How many conversations' call counters the demo keeps; the oldest goes first (a
/// forgotten conversation just plays its scenario from the start again).
const MAX_CONVERSATIONS: usize = 4096;

/// Call counters per conversation, at most [`MAX_CONVERSATIONS`] of them.
#[derive(Default)]
struct Calls {
    counts: HashMap<u64, u32>,
    order: std::collections::VecDeque<u64>,
}

impl Calls {
    /// Counts one more call of `key`; answers how many it has had.
    fn count(&mut self, key: u64) -> u32 {
        if !self.counts.contains_key(&key) {
            while self.order.len() >= MAX_CONVERSATIONS {
                if let Some(old) = self.order.pop_front() {
                    self.counts.remove(&old);
                }
            }
            self.order.push_back(key);
        }
        let n = self.counts.entry(key).or_insert(0);
        *n = n.saturating_add(1);
        *n
    }
}

/// The routes to nest at `/demo/v1`.
pub fn routes<S>(delta_every: Duration) -> Router<S> {
    let demo = Demo {
        delta_every,
        calls: Arc::default(),
    };
    Router::new()
        .route("/chat/completions", post(chat))
        .with_state(demo)
}

#[derive(serde::Deserialize)]
struct ChatBody {
    model: String,
    #[serde(default)]
    messages: Vec<super::ChatMessage>,
}

async fn chat(State(demo): State<Demo>, Json(body): Json<ChatBody>) -> Response {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    body.model.hash(&mut h);
    for m in &body.messages {
        m.role.hash(&mut h);
        m.content.hash(&mut h);
    }
    let call = {
        let mut calls = demo.calls.lock().expect("demo lock");
        calls.count(h.finish())
    };
    let prompt = body
        .messages
        .iter()
        .rev()
        .find(|m| m.role == "user")
        .map(|m| m.content.as_str());
    let reply = reply_for(prompt.unwrap_or(""), &body.model);
    if let Some(agent) = match body.model.as_str() {
        "demo-agent" => Some(Agent::Lists),
        "demo-agent-flaky" => Some(Agent::Flaky),
        "demo-agent-writes" => Some(Agent::Writes),
        _ => None,
    } {
        return agent_step(demo.delta_every, &body.messages, agent);
    }
    match body.model.as_str() {
        "demo-flaky" if call <= 2 => error(
            503,
            &[],
            "server_error",
            "The demo provider is flaky: try again.",
        ),
        "demo-overloaded" | "demo-down" => error(
            529,
            &[],
            "overloaded_error",
            "Overloaded: the demo provider is always busy.",
        ),
        "demo-busy" if call <= 3 => error(
            529,
            &[],
            "overloaded_error",
            "Overloaded: the demo provider is busy for one turn.",
        ),
        "demo-quota" => error(
            429,
            &[("retry-after", "3000")],
            "rate_limit_error",
            "Rate limited: the demo provider asks you to wait 50 minutes.",
        ),
        "demo-auth" => error(401, &[], "invalid_api_key", "Incorrect API key provided."),
        "demo-overflow" if call <= 1 => error_coded(
            400,
            "invalid_request_error",
            "context_length_exceeded",
            "This model's maximum context length was exceeded.",
        ),
        "demo-drop" => stream(
            demo.delta_every,
            words(&reply).into_iter().take(6).collect(),
            false,
        ),
        "demo-long" => stream(demo.delta_every, words(&reply.repeat(8)), true),
        _ => stream(demo.delta_every, words(&reply), true),
    }
}

/// One step of the demo agent. A turn's first step asks for `mulligan__list_sessions`; the
/// step after a tool result answers with what it found (the flaky agent answers 503 there
/// instead, every time, so only a continuation gets past it); a continuation answers.
fn agent_step(every: Duration, messages: &[super::ChatMessage], agent: Agent) -> Response {
    let since_prompt = messages
        .iter()
        .rev()
        .take_while(|m| m.role != "user")
        .collect::<Vec<_>>();
    let last = messages.last();
    let continuing = last.is_some_and(|m| {
        m.role == "user" && m.content.starts_with("Your previous turn was cut off")
    });
    if since_prompt.is_empty() && !continuing {
        let asked = last.and_then(|m| asked_call(&m.content));
        let rename =
            serde_json::json!({"title": demo_title(last.map_or("", |m| m.content.as_str()))})
                .to_string();
        let (intro, name, arguments) = match (asked, agent) {
            (Some((name, arguments)), _) => (
                "Calling the tool you asked for. ",
                name,
                arguments.to_string(),
            ),
            (None, Agent::Writes) => (
                "I will give this session a title that says what it is about. ",
                "mulligan__rename_session",
                rename,
            ),
            (None, _) => (
                "Let me check my sub-sessions first. ",
                "mulligan__list_sessions",
                "{}".to_string(),
            ),
        };
        let mut words = words(intro);
        let call = serde_json::json!({"choices": [{"index": 0, "delta": {"tool_calls": [{
            "index": 0, "id": format!("call_demo_{}", messages.len()), "type": "function",
            "function": {"name": name, "arguments": arguments}}]}}]});
        words.push(String::new());
        return stream_with_call(every, words, call);
    }
    if agent == Agent::Flaky && last.is_some_and(|m| m.role == "tool") {
        return error(
            503,
            &[],
            "server_error",
            "The demo agent's provider failed after the tool call: retry to continue the turn.",
        );
    }
    let result = messages.iter().rev().find(|m| m.role == "tool");
    if agent == Agent::Writes {
        let declined = result.is_some_and(|m| {
            m.content.contains("declined") || m.content.contains("did not decide")
        });
        let renamed = result
            .and_then(|m| serde_json::from_str::<serde_json::Value>(&m.content).ok())
            .and_then(|v| v["title"].as_str().map(str::to_string));
        let text = match (declined, renamed) {
            (true, _) => {
                "Understood: you declined the rename, so I left the title as it was.".to_string()
            }
            (false, Some(t)) => format!("Done: this session is now titled “{t}”."),
            (false, None) => {
                "The rename did not go through; the tool's answer is above.".to_string()
            }
        };
        return stream(every, words(&text), true);
    }
    let found = result
        .and_then(|m| serde_json::from_str::<serde_json::Value>(&m.content).ok())
        .and_then(|v| v["sessions"].as_array().map(Vec::len));
    let text = match found {
        Some(0) => "I have no sub-sessions yet. Create one with this session as its parent and I will see it.".to_string(),
        Some(n) => format!("I found {n} sub-session(s). I can send any of them a message with the mulligan tools."),
        None => "I checked what already finished; the tool's result is above. Nothing else is needed.".to_string(),
    };
    stream(every, words(&text), true)
}

/// The title the writing demo agent gives its session: the prompt's first words.
fn demo_title(prompt: &str) -> String {
    let words: Vec<&str> = prompt.split_whitespace().take(6).collect();
    let mut title = format!("About: {}", words.join(" "));
    if title.chars().count() > 60 {
        title = title.chars().take(60).collect();
    }
    title
}

/// The tool an operator's prompt `call <server>__<tool> [json arguments]` asks the demo agent
/// for (arguments `{}` when none are given): any configured tool can be tried offline.
fn asked_call(prompt: &str) -> Option<(&str, &str)> {
    let rest = prompt.trim().strip_prefix("call ")?.trim_start();
    let (name, arguments) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    let arguments = arguments.trim();
    (!name.is_empty()).then_some((
        name,
        if arguments.is_empty() {
            "{}"
        } else {
            arguments
        },
    ))
}

/// Streams `deltas`, then one chunk asking for a tool call, then `[DONE]`.
fn stream_with_call(every: Duration, deltas: Vec<String>, call: serde_json::Value) -> Response {
    let mut frames: Vec<String> = deltas
        .into_iter()
        .filter(|d| !d.is_empty())
        .map(|text| {
            let chunk = serde_json::json!({"choices": [{"index": 0, "delta": {"content": text}}]});
            format!("data: {chunk}\n\n")
        })
        .collect();
    frames.push(format!("data: {call}\n\n"));
    frames.push("data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n".into());
    let body = futures::stream::unfold(frames.into_iter(), move |mut it| async move {
        let frame = it.next()?;
        tokio::time::sleep(every).await;
        Some((Ok::<_, std::io::Error>(Bytes::from(frame)), it))
    });
    let mut resp = Body::from_stream(body).into_response();
    resp.headers_mut().insert(
        "content-type",
        HeaderValue::from_static("text/event-stream"),
    );
    resp
}

fn reply_for(prompt: &str, model: &str) -> String {
    if let Some(text) = echoed(prompt) {
        return text.to_string();
    }
    let quoted: String = prompt.chars().take(120).collect();
    let more = if prompt.chars().count() > 120 {
        "…"
    } else {
        ""
    };
    format!(
        "You said: \u{201c}{quoted}{more}\u{201d}. This reply comes from Mulligan's built-in demo \
         provider ({model}), streamed word by word over the same HTTP client a real provider \
         uses. Try the models demo-flaky, demo-overloaded, demo-quota, demo-drop, demo-auth and \
         demo-overflow to watch a turn fail and recover."
    )
}

/// The text of a prompt `echo <text>` (after the first space or line break): what the page
/// renders from a reply can be tried offline, Markdown and all.
fn echoed(prompt: &str) -> Option<&str> {
    let (word, text) = prompt.split_once(char::is_whitespace)?;
    (word == "echo").then_some(text)
}

/// Splits text into word-sized deltas that concatenate back to it.
fn words(text: &str) -> Vec<String> {
    text.split_inclusive(' ').map(str::to_string).collect()
}

fn stream(every: Duration, deltas: Vec<String>, finish: bool) -> Response {
    let total = deltas.len() as u64;
    let body = futures::stream::unfold(
        (deltas.into_iter(), 0u8),
        move |(mut it, stage)| async move {
            if stage == 0 {
                if let Some(text) = it.next() {
                    tokio::time::sleep(every).await;
                    let chunk =
                        serde_json::json!({"choices": [{"index": 0, "delta": {"content": text}}]});
                    return Some((
                        Ok::<_, std::io::Error>(Bytes::from(format!("data: {chunk}\n\n"))),
                        (it, 0),
                    ));
                }
                if !finish {
                    // Cut the connection mid-reply, as a dropped upstream would.
                    return Some((
                        Err(std::io::Error::other("demo-drop cut the stream")),
                        (it, 2),
                    ));
                }
                let usage = serde_json::json!({"choices": [], "usage": {"total_tokens": total}});
                return Some((
                    Ok(Bytes::from(format!("data: {usage}\n\ndata: [DONE]\n\n"))),
                    (it, 2),
                ));
            }
            None
        },
    );
    let mut resp = Body::from_stream(body).into_response();
    resp.headers_mut().insert(
        "content-type",
        HeaderValue::from_static("text/event-stream"),
    );
    resp
}

fn error(
    status: u16,
    headers: &[(&'static str, &'static str)],
    kind: &str,
    message: &str,
) -> Response {
    let mut resp = error_coded(status, kind, kind, message);
    let h: &mut HeaderMap = resp.headers_mut();
    for (k, v) in headers {
        h.insert(*k, HeaderValue::from_static(v));
    }
    resp
}

fn error_coded(status: u16, kind: &str, code: &str, message: &str) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = serde_json::json!({"error": {"type": kind, "code": code, "message": message}});
    (status, Json(body)).into_response()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_prompt_can_name_the_tool_the_demo_agent_calls() {
        use super::asked_call;
        assert_eq!(
            asked_call("call every__echo {\"message\": \"hi\"}"),
            Some(("every__echo", "{\"message\": \"hi\"}"))
        );
        assert_eq!(
            asked_call("  call mulligan__list_sessions "),
            Some(("mulligan__list_sessions", "{}"))
        );
        assert_eq!(asked_call("what are my sub-sessions?"), None);
        assert_eq!(asked_call("call "), None);
    }

    #[test]
    fn call_counters_are_bounded_and_forget_the_oldest_conversation() {
        let mut calls = super::Calls::default();
        assert_eq!(calls.count(1), 1);
        assert_eq!(calls.count(1), 2);
        for key in 2..(super::MAX_CONVERSATIONS as u64 + 10) {
            calls.count(key);
        }
        assert_eq!(calls.counts.len(), super::MAX_CONVERSATIONS);
        assert_eq!(calls.order.len(), super::MAX_CONVERSATIONS);
        assert_eq!(calls.count(1), 1, "the oldest conversation was forgotten");
    }

    #[test]
    fn an_echo_prompt_is_answered_with_its_text() {
        let md = "# Title\n\n- one\n- two\n\n```sh\nls -l\n```";
        let reply = super::reply_for(&format!("echo {md}"), "demo");
        assert_eq!(reply, md);
        assert_eq!(super::words(&reply).concat(), md);
        assert_eq!(super::reply_for("echo\n| a |", "demo"), "| a |");
        assert!(super::reply_for("echoes", "demo").starts_with("You said"));
        assert!(super::reply_for("echo", "demo").starts_with("You said"));
    }

    #[test]
    fn words_concatenate_back_to_the_reply() {
        let text = super::reply_for("hello there", "demo");
        assert_eq!(super::words(&text).concat(), text);
        assert!(text.contains("hello there"));
    }
}
