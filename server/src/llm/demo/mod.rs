//! The built-in `demo` provider's endpoint: an OpenAI-compatible `/demo/v1/chat/completions`
//! served by Mulligan itself, streaming a deterministic reply at a human pace, and playing
//! named fault scenarios chosen by the model name.
mod agent;
mod answers;

use agent::{agent_step, Agent};
use answers::{error, error_coded, stream, words};
use axum::extract::State;
use axum::response::Response;
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

#[cfg(test)]
mod tests {

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
