//! The demo agents' steps: first a tool call (a listing, a rename, or the one the prompt
//! names), then an answer from its result.
use super::answers::{error, stream, stream_with_call, words};
use crate::llm::ChatMessage;
use axum::response::Response;
use std::time::Duration;

/// Which demo agent plays a step.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Agent {
    /// Lists its sub-sessions (a read-only tool), then answers.
    Lists,
    /// The same, failing 503 on the step after the tool call.
    Flaky,
    /// Renames its own session (a tool that writes: it asks first).
    Writes,
}

/// One step of the demo agent. A turn's first step asks for `mulligan__list_sessions`; the
/// step after a tool result answers with what it found (the flaky agent answers 503 there
/// instead, every time, so only a continuation gets past it); a continuation answers.
pub(super) fn agent_step(every: Duration, messages: &[ChatMessage], agent: Agent) -> Response {
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
}
