//! CONTRACT §2 wire types: the only definition of what crosses the API, shared by the server,
//! the browser, the CLI and the tests.
use serde::{Deserialize, Serialize};

mod tools;
pub use tools::*;

/// Milliseconds since the Unix epoch.
pub type Millis = i64;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum SessionStatus {
    #[default]
    Idle,
    Running,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum AutoRetry {
    #[default]
    Browser,
    Background,
    Off,
}

impl AutoRetry {
    pub fn as_str(self) -> &'static str {
        match self {
            AutoRetry::Browser => "browser",
            AutoRetry::Background => "background",
            AutoRetry::Off => "off",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "browser" => Some(AutoRetry::Browser),
            "background" => Some(AutoRetry::Background),
            "off" => Some(AutoRetry::Off),
            _ => None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WaitingRetry {
    pub attempt: u32,
    pub fires_at: Millis,
    pub reason: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    pub id: String,
    pub status: RunStatus,
    pub kind: RunKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryClassification>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Millis>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Session {
    pub id: String,
    pub title: String,
    pub model: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<String>,
    pub status: SessionStatus,
    pub created_at: Millis,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run: Option<RunSummary>,
    #[serde(default)]
    pub auto_retry: AutoRetry,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_retry: Option<WaitingRetry>,
    /// The tool sources this session's turns may use (CONTRACT §6).
    #[serde(default)]
    pub tools: Vec<String>,
}

/// `POST /sessions` answers the session plus its agent token, shown this once.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CreatedSession {
    #[serde(flatten)]
    pub session: Session,
    pub agent_token: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Operator,
    Agent,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageStatus {
    Streaming,
    Complete,
    Failed,
    Cancelled,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub id: String,
    pub session_id: String,
    pub role: Role,
    pub content: String,
    pub created_at: Millis,
    pub superseded: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<MessageStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryClassification>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provenance: Option<Provenance>,
    /// On a reply still streaming: how many deltas `content` already holds, so a client
    /// that loaded this snapshot skips replayed deltas with `seq <= delta_seq`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delta_seq: Option<u64>,
    /// An agent reply's text and tool calls, in order, when it made tool calls; `content`
    /// stays the concatenated text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parts: Option<Vec<Part>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Queued,
    Running,
    Completed,
    Failed,
    Cancelled,
}

impl RunStatus {
    pub fn is_active(self) -> bool {
        matches!(self, RunStatus::Queued | RunStatus::Running)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunKind {
    Prompt,
    Regenerate,
    Resend,
    Continuation,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Run {
    pub id: String,
    pub session_id: String,
    pub anchor_message_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_message_id: Option<String>,
    pub status: RunStatus,
    pub kind: RunKind,
    pub attempt: u32,
    pub tier1_attempts: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryClassification>,
    /// When the operator cancelled Tier 2 for this failed run: no page arms it again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_dismissed_at: Option<Millis>,
    pub created_at: Millis,
    /// Why this run exists when it is not the operator's own prompt (regenerate, retry).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provenance: Option<Provenance>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Millis>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Millis>,
    /// Model steps begun in this run.
    #[serde(default)]
    pub steps: u32,
    /// Tool calls of this run that reached a tool server.
    #[serde(default)]
    pub tools_executed: u32,
}

impl Run {
    pub fn summary(&self) -> RunSummary {
        RunSummary {
            id: self.id.clone(),
            status: self.status,
            kind: self.kind,
            retry: self.retry.clone(),
            error_message: self.error_message.clone(),
            finished_at: self.finished_at,
        }
    }
}

/// How a failed run may be retried; persisted on the run and on its reply.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryClassification {
    pub retryable: bool,
    pub retry_class: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_until: Option<Millis>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provenance {
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manual: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Receipt {
    pub message_id: String,
    pub run_id: String,
    pub queued: bool,
    pub superseded: Vec<String>,
    /// Regenerate: the tool calls the superseded replies had executed (they may run again).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tools_superseded: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SessionList {
    pub sessions: Vec<Session>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SessionDetail {
    pub session: Session,
    pub messages: Vec<Message>,
    pub runs: Vec<Run>,
    /// The event id this snapshot is current to: resume the session's SSE after it.
    #[serde(default)]
    pub last_event_id: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    pub n: u32,
    pub started_at: Millis,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_in_ms: Option<i64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunDetail {
    pub run: Run,
    pub attempts: Vec<Attempt>,
}

/// `POST /sessions/:sid/retry` answers this.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RetryReceipt {
    /// `<prompt id>~resume-<n>`: which attempt of which prompt this is.
    pub prompt_id: String,
    pub run_id: String,
    pub kind: RunKind,
}

/// `POST /sessions/:sid/release` answers this: the held runs that may now go on.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Released {
    pub released: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Regenerate {
    #[serde(default)]
    pub if_last_run: Option<String>,
    /// An operator's click on a reply (not Tier 2): `if_last_run` may then name any ended
    /// run (a completed or stopped reply the operator saw), still only while it is the
    /// anchor's latest; and the call is not counted as a Tier 2 retry.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub manual: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClientConfig {
    pub tier2_base_ms: u64,
    pub tier2_cap_ms: u64,
    /// Tier 1's attempts per run, for "attempt 2 of 3".
    #[serde(default)]
    pub tier1_max_attempts: u32,
}

/// A provider-wide cooldown: every run for `key` fails without a request until `until`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cooldown {
    /// Provider, endpoint, model and a short hash of the API key, never the key:
    /// `openai https://api.openai.com/v1 model=gpt-4o-mini key=sha256:ab12cd34ef56`.
    pub key: String,
    pub until: Millis,
    /// The class of the answer that advised the wait: `rate_limited`, `overloaded` or
    /// `quota_exhausted`.
    pub reason: String,
}

/// `GET /providers` (and `DELETE /providers/cooldowns`) answers this.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProvidersResponse {
    pub cooldowns: Vec<Cooldown>,
}

// ---- request bodies ----

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CreateSession {
    #[serde(default)]
    pub title: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub parent_id: Option<String>,
    /// `browser` (default), `background` or `off`.
    #[serde(default)]
    pub auto_retry: Option<AutoRetry>,
    /// Tool sources by name; default every configured source plus `mulligan`.
    #[serde(default)]
    pub tools: Option<Vec<String>>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PostMessage {
    pub content: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PatchSession {
    #[serde(default)]
    pub title: Option<String>,
    #[serde(default)]
    pub auto_retry: Option<AutoRetry>,
    #[serde(default)]
    pub tools: Option<Vec<String>>,
}

/// `DELETE /providers/cooldowns`: which cooldown to end, by its shown key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClearCooldown {
    pub key: String,
}

// ---- events (SSE `event:` names) ----

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Delta {
    pub run_id: String,
    pub message_id: String,
    pub seq: u64,
    pub text: String,
    /// The model step (from 1) this text belongs to.
    #[serde(default)]
    pub step: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AttemptEvent {
    pub run_id: String,
    pub n: u32,
    pub retry_in_ms: i64,
    pub reason: String,
}

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
        Some(match name {
            "message" => serde_json::from_str(data).map(Event::Message),
            "delta" => serde_json::from_str(data).map(Event::Delta),
            "run" => serde_json::from_str(data).map(Event::Run),
            "attempt" => serde_json::from_str(data).map(Event::Attempt),
            "session" => serde_json::from_str(data).map(Event::Session),
            "tool_call" => serde_json::from_str(data).map(Event::ToolCall),
            _ => return None,
        })
    }
}

// ---- errors ----

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub code: String,
    pub message: String,
}

/// `{"error": {"code", "message"}}`, the shape of every refusal.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApiError {
    pub error: ErrorBody,
}

/// Message `content` limit, in chars after trim (CONTRACT §2).
pub const MAX_CONTENT_CHARS: usize = 100_000;
/// Request bodies over this get 413.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enums_are_snake_case_on_the_wire() {
        assert_eq!(
            serde_json::to_string(&RunStatus::Cancelled).unwrap(),
            "\"cancelled\""
        );
        assert_eq!(
            serde_json::to_string(&RunKind::Continuation).unwrap(),
            "\"continuation\""
        );
        assert_eq!(
            serde_json::to_string(&Role::Operator).unwrap(),
            "\"operator\""
        );
    }

    #[test]
    fn absent_options_are_omitted_and_events_round_trip() {
        let m = Message {
            id: "m1".into(),
            session_id: "s1".into(),
            role: Role::Agent,
            content: "hi".into(),
            created_at: 1,
            superseded: false,
            run_id: Some("r1".into()),
            status: Some(MessageStatus::Failed),
            error_message: None,
            retry: Some(RetryClassification {
                retryable: true,
                retry_class: "overloaded".into(),
                retry_after_until: None,
            }),
            provenance: None,
            delta_seq: None,
            parts: None,
        };
        let json = serde_json::to_value(&m).unwrap();
        assert!(json.get("error_message").is_none());
        assert_eq!(json["retry"]["retry_class"], "overloaded");
        let ev = Event::Message(m);
        let back = Event::parse(ev.name(), &ev.data_json()).unwrap().unwrap();
        assert_eq!(back, ev);
        assert!(Event::parse("nope", "{}").is_none());
    }
}
