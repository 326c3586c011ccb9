//! Server-Sent Events: each event's `event:` name and its `data:` JSON.
use super::{Message, MessageId, Run, RunId, Session, SessionId, ToolCallEvent};
use serde::{Deserialize, Serialize};

/// Two lines of text: more than this in one delta, or in one draw of a reply, is text coming
/// faster than anyone reads it. The server then sends deltas a third as often, and the page
/// draws them half as often.
pub const FAST_TEXT_BYTES: usize = 160;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
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
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
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

/// The `event:` name of a marker on a stream that follows several sessions
/// (`GET /events?sessions=…`): its `data:` is a session id as a JSON string, and the events
/// after it, up to the next marker, are that session's.
pub const SESSION_MARKER: &str = "session_id";

/// The most sessions one stream follows.
pub const MAX_FOLLOWED: usize = 100;

/// The sessions one stream follows, each resumed after its own event id: the `sessions`
/// query of `GET /events`, written `ID:LAST_EVENT_ID,…` (`:LAST_EVENT_ID` may be left out:
/// from now on).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Following(pub Vec<(SessionId, Option<i64>)>);

impl Following {
    /// The query value, as [`Following::parse`] reads it.
    pub fn to_query(&self) -> String {
        let mut out = String::new();
        for (i, (sid, after)) in self.0.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(sid.as_str());
            if let Some(after) = after {
                out.push(':');
                out.push_str(&after.to_string());
            }
        }
        out
    }

    /// Reads `ID[:LAST_EVENT_ID],…`: 1 to [`MAX_FOLLOWED`] sessions, none twice; the error
    /// in words.
    ///
    /// ```
    /// use app::wire::{Following, SessionId};
    /// let f = Following::parse("s_a:41,s_b").unwrap();
    /// assert_eq!(
    ///     f.0,
    ///     [(SessionId::new("s_a"), Some(41)), (SessionId::new("s_b"), None)]
    /// );
    /// assert_eq!(f.to_query(), "s_a:41,s_b");
    /// assert!(Following::parse("s_a,s_a").unwrap_err().contains("twice"));
    /// ```
    pub fn parse(text: &str) -> Result<Following, String> {
        let text = text.trim();
        if text.is_empty() {
            return Err("name the sessions to follow: sessions=ID[:LAST_EVENT_ID],…".into());
        }
        let mut list: Vec<(SessionId, Option<i64>)> = Vec::new();
        for item in text.split(',') {
            if list.len() == MAX_FOLLOWED {
                return Err(format!("a stream follows at most {MAX_FOLLOWED} sessions"));
            }
            let item = item.trim();
            let (sid, after) = match item.rsplit_once(':') {
                Some((sid, n)) => {
                    let n = n
                        .parse::<i64>()
                        .map_err(|_| format!("{n:?} after session {sid:?} is not an event id"))?;
                    (sid, Some(n))
                }
                None => (item, None),
            };
            let sid: SessionId = sid
                .parse()
                .map_err(|e| format!("{item:?} is not a session id: {e}"))?;
            if list.iter().any(|(s, _)| *s == sid) {
                return Err(format!("session \"{sid}\" is named twice"));
            }
            list.push((sid, after));
        }
        Ok(Following(list))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_follow_list_reads_back_what_it_writes() {
        let list = Following(vec![
            (SessionId::new("s_a"), Some(12)),
            (SessionId::new("s_b"), None),
            (SessionId::new("s_c"), Some(0)),
        ]);
        assert_eq!(list.to_query(), "s_a:12,s_b,s_c:0");
        assert_eq!(Following::parse(&list.to_query()), Ok(list));
    }

    #[test]
    fn a_bad_follow_list_says_what_is_wrong() {
        for (bad, says) in [
            ("", "name the sessions"),
            ("  ", "name the sessions"),
            ("s_a:x", "not an event id"),
            ("s_a:1,s_a:2", "named twice"),
            ("s_a,,s_b", "not a session id"),
            (":5", "not a session id"),
        ] {
            let err = Following::parse(bad).expect_err(bad);
            assert!(err.contains(says), "{bad:?} answered {err:?}");
        }
        let many: Vec<String> = (0..=MAX_FOLLOWED).map(|i| format!("s_{i}")).collect();
        let err = Following::parse(&many.join(",")).unwrap_err();
        assert!(err.contains("at most"), "{err}");
        let most: Vec<String> = (0..MAX_FOLLOWED).map(|i| format!("s_{i}:{i}")).collect();
        assert_eq!(
            Following::parse(&most.join(",")).unwrap().0.len(),
            MAX_FOLLOWED
        );
    }
}
