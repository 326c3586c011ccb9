//! Server-Sent Events: each event's `event:` name and its `data:` JSON.
use super::{Message, MessageId, Run, RunId, Session, ToolCallEvent};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Delta {
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub run_id: RunId,
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub message_id: MessageId,
    pub seq: u64,
    pub text: String,
    /// The model step (from 1) this text belongs to.
    #[serde(default)]
    pub step: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AttemptEvent {
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub run_id: RunId,
    pub n: u32,
    pub retry_in_ms: i64,
    pub reason: String,
}

/// Every event name, as [`Event::name`] gives them (the event log reads stored names back
/// through this list).
pub const EVENT_NAMES: &[&str] = &["message", "delta", "run", "attempt", "session", "tool_call"];

/// One SSE event: its `event:` name is [`Event::name`], its `data:` the inner JSON.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    Message(Message),
    Delta(Delta),
    Run(Run),
    Attempt(AttemptEvent),
    Session(Session),
    ToolCall(ToolCallEvent),
}

impl Event {
    pub fn name(&self) -> &'static str {
        match self {
            Event::Message(_) => "message",
            Event::Delta(_) => "delta",
            Event::Run(_) => "run",
            Event::Attempt(_) => "attempt",
            Event::Session(_) => "session",
            Event::ToolCall(_) => "tool_call",
        }
    }

    pub fn data_json(&self) -> String {
        let r = match self {
            Event::Message(m) => serde_json::to_string(m),
            Event::Delta(d) => serde_json::to_string(d),
            Event::Run(r) => serde_json::to_string(r),
            Event::Attempt(a) => serde_json::to_string(a),
            Event::Session(s) => serde_json::to_string(s),
            Event::ToolCall(t) => serde_json::to_string(t),
        };
        r.expect("wire types always serialize")
    }

    /// Parses an event from its SSE name and data; `None` for names this build doesn't know.
    pub fn parse(name: &str, data: &str) -> Option<Result<Event, serde_json::Error>> {
        let mut de = serde_json::Deserializer::from_str(data);
        let event = Event::read(name, &mut de)?;
        Some(event.and_then(|e| de.end().map(|()| e)))
    }

    /// Reads the data of an event named `name` from any serde deserializer (JSON text on
    /// the server and in the CLI, a JavaScript value in the browser): the one place that
    /// maps [`EVENT_NAMES`] to their types. `None` for names this build doesn't know.
    pub fn read<'de, D: serde::Deserializer<'de>>(
        name: &str,
        de: D,
    ) -> Option<Result<Event, D::Error>> {
        Some(match name {
            "message" => Message::deserialize(de).map(Event::Message),
            "delta" => Delta::deserialize(de).map(Event::Delta),
            "run" => Run::deserialize(de).map(Event::Run),
            "attempt" => AttemptEvent::deserialize(de).map(Event::Attempt),
            "session" => Session::deserialize(de).map(Event::Session),
            "tool_call" => ToolCallEvent::deserialize(de).map(Event::ToolCall),
            _ => return None,
        })
    }
}
