//! Providers: one trait, "open a streaming chat completion, then yield deltas".
pub mod anthropic;
pub mod catalogue;
pub mod demo;
pub mod limits;
mod offered;
pub mod openai;
pub mod redacted;
mod sse;
pub mod tool_calls;

pub use limits::Limits;
pub use offered::Offered;

use app::wire::{Decision, RetryClass};
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use std::time::Duration;

/// What a run asks of a provider: one model step.
#[derive(Clone, Debug)]
pub struct ChatRequest {
    pub model: String,
    /// Shared: each Tier 1 attempt and each fallback model resends it without a copy.
    pub messages: std::sync::Arc<[ChatMessage]>,
    /// The tools the model may call in this step, by their `<server>__<tool>` names (none:
    /// a plain chat completion). Shared by every step of a run.
    pub tools: std::sync::Arc<[Offered]>,
}

/// One message of the conversation sent to a provider, in the Chat Completions shape
/// (`assistant` with `tool_calls`, `tool` with `tool_call_id`); Anthropic's provider
/// converts it.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ChatToolCall>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl ChatMessage {
    pub fn text(role: &str, content: impl Into<String>) -> ChatMessage {
        ChatMessage {
            role: role.into(),
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }
}

/// A tool call of an assistant message, as the model asked for it.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ChatToolCall {
    pub id: String,
    #[serde(rename = "type", default = "function_type")]
    pub kind: String,
    pub function: ChatFunction,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ChatFunction {
    pub name: String,
    /// The arguments' JSON text.
    pub arguments: String,
}

fn function_type() -> String {
    "function".into()
}

impl ChatToolCall {
    pub fn new(id: &str, name: &str, arguments: &str) -> ChatToolCall {
        ChatToolCall {
            id: id.into(),
            kind: function_type(),
            function: ChatFunction {
                name: name.into(),
                arguments: arguments.into(),
            },
        }
    }
}

/// One item of an opened stream.
#[derive(Clone, Debug, PartialEq)]
pub enum StreamItem {
    Delta(String),
    /// Tokens the provider reports for the whole call.
    Usage {
        total_tokens: u64,
    },
    /// The tool calls the model asked for in this step, complete (sent before `Done`).
    ToolCalls(Vec<tool_calls::AssembledCall>),
    /// The provider said the reply is complete.
    Done,
    /// An ACP agent's tool call, as it starts or changes (CONTRACT §9): the agent runs it.
    AgentCall(AgentCall),
    /// An ACP agent asks permission before one of its tool calls (CONTRACT §9).
    AgentAsk(AgentAsk),
    /// Bytes arrived that complete no other item (a keep-alive ping or comment, a thinking
    /// delta, a tool call's argument fragment): the stream is alive (CONTRACT §6).
    Heard,
}

/// A tool call an ACP agent runs itself, as one `tool_call` or `tool_call_update` tells it:
/// what is unset did not change.
#[derive(Clone, Debug, PartialEq)]
pub struct AgentCall {
    /// The agent's id for it.
    pub id: String,
    pub title: Option<String>,
    pub input: Option<serde_json::Value>,
    /// `Some(true)`: it ended well; `Some(false)`: it failed; `None`: it runs.
    pub ended_ok: Option<bool>,
    /// Its output as text, when the update carries some.
    pub output: Option<String>,
}

/// An ACP agent's `session/request_permission`: the call it asks about, and where the
/// operator's decision goes (once). Dropped unanswered, the agent's request is cancelled.
#[derive(Clone, Debug)]
pub struct AgentAsk {
    pub call: AgentCall,
    answer: std::sync::Arc<std::sync::Mutex<Option<tokio::sync::oneshot::Sender<Decision>>>>,
}

impl AgentAsk {
    /// An ask about `call`, and where its answer arrives.
    pub fn new(call: AgentCall) -> (AgentAsk, tokio::sync::oneshot::Receiver<Decision>) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let ask = AgentAsk {
            call,
            answer: std::sync::Arc::new(std::sync::Mutex::new(Some(tx))),
        };
        (ask, rx)
    }

    /// Answers the agent (the first answer counts).
    pub fn answer(&self, decision: Decision) {
        let tx = self.answer.lock().ok().and_then(|mut a| a.take());
        if let Some(tx) = tx {
            let _ = tx.send(decision);
        }
    }
}

impl PartialEq for AgentAsk {
    fn eq(&self, other: &AgentAsk) -> bool {
        self.call == other.call && std::sync::Arc::ptr_eq(&self.answer, &other.answer)
    }
}

/// Why opening or reading a provider stream failed, with what the classifier needs.
#[derive(Clone, Debug, PartialEq)]
pub enum ProviderError {
    /// A non-2xx answer (or an error event on a 2xx stream, with its status if any).
    Status {
        status: u16,
        /// The provider's error `type` and `code` and its message, when the body had them.
        error_type: Option<String>,
        error_code: Option<String>,
        message: String,
        retry_after: Option<RetryAfter>,
        /// `x-should-retry: true|false`.
        should_retry: Option<bool>,
    },
    /// Connect, DNS, reset or timeout before or while reading.
    Transport { message: String },
    /// The stream ended or broke before the provider said it was done.
    StreamCut { message: String },
    /// No bytes for the idle limit mid-stream.
    Stalled { idle: Duration },
    /// The provider did not answer in time: no status line within the header timeout, or a
    /// run past its longest duration.
    Timeout { message: String },
    /// The provider broke the protocol: an SSE line or event larger than the cap.
    Protocol { message: String },
    /// No API key is configured for a provider that needs one.
    NoCredentials,
    /// Not sent: a provider-wide cooldown holds this provider, endpoint, key and model until
    /// `until` (epoch ms); `class` is the class of the answer that advised the wait.
    CoolingDown { class: RetryClass, until: i64 },
    /// An ACP agent failed the turn (CONTRACT §9), classified from what it sent
    /// ([`crate::retry::agent_failure`]); `message` is the agent's own text.
    Agent {
        class: RetryClass,
        message: String,
        retry_after: Option<RetryAfter>,
    },
}

/// A provider's advised wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryAfter {
    /// Relative, from `retry-after-ms` or `Retry-After: <seconds>`.
    Delay(Duration),
    /// Absolute, from `Retry-After: <HTTP date>` or a reset header, in epoch millis.
    At(i64),
    /// A relative wait whose end is already fixed (as the deadline of the cooldown it
    /// started): Tier 1 sleeps `wait` exactly; classifications say `until`.
    Pinned { wait: Duration, until: i64 },
}

impl RetryAfter {
    /// This advice with its end fixed at `until` (a relative wait keeps its length).
    pub fn pinned(self, until: i64) -> RetryAfter {
        match self {
            RetryAfter::Delay(wait) | RetryAfter::Pinned { wait, .. } => {
                RetryAfter::Pinned { wait, until }
            }
            RetryAfter::At(_) => RetryAfter::At(until),
        }
    }
}

impl ProviderError {
    /// This error with the secrets in its text replaced (a proxy may quote the API key).
    pub fn redacted(self, r: &crate::redact::Redactor) -> ProviderError {
        let clean = |s: String| r.redact_owned(s);
        match self {
            ProviderError::Status {
                status,
                error_type,
                error_code,
                message,
                retry_after,
                should_retry,
            } => ProviderError::Status {
                status,
                error_type: error_type.map(clean),
                error_code: error_code.map(clean),
                message: clean(message),
                retry_after,
                should_retry,
            },
            ProviderError::Transport { message } => ProviderError::Transport {
                message: clean(message),
            },
            ProviderError::StreamCut { message } => ProviderError::StreamCut {
                message: clean(message),
            },
            ProviderError::Timeout { message } => ProviderError::Timeout {
                message: clean(message),
            },
            ProviderError::Protocol { message } => ProviderError::Protocol {
                message: clean(message),
            },
            ProviderError::Agent {
                class,
                message,
                retry_after,
            } => ProviderError::Agent {
                class,
                message: clean(message),
                retry_after,
            },
            e @ (ProviderError::Stalled { .. }
            | ProviderError::NoCredentials
            | ProviderError::CoolingDown { .. }) => e,
        }
    }
}

impl std::fmt::Display for ProviderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProviderError::Status {
                status, message, ..
            } if *status > 0 => {
                write!(f, "provider answered {status}: {message}")
            }
            ProviderError::Status { message, .. } => write!(f, "provider error: {message}"),
            ProviderError::Transport { message } => {
                write!(f, "could not reach the provider: {message}")
            }
            ProviderError::StreamCut { message } => {
                write!(f, "the reply stream was cut off: {message}")
            }
            ProviderError::Stalled { idle } => {
                write!(
                    f,
                    "the provider sent nothing for {} s mid-reply",
                    idle.as_secs()
                )
            }
            ProviderError::Timeout { message } => write!(f, "{message}"),
            ProviderError::Protocol { message } => {
                write!(f, "the provider broke the stream protocol: {message}")
            }
            ProviderError::NoCredentials => write!(f, "no API key is configured for this provider"),
            ProviderError::Agent { message, .. } => write!(f, "{message}"),
            ProviderError::CoolingDown { class, until } => {
                write!(
                    f,
                    "not sent: the provider advised waiting until {} ({class}) for this model and key",
                    limits::http_date(*until)
                )
            }
        }
    }
}

pub type DeltaStream = BoxStream<'static, Result<StreamItem, ProviderError>>;

/// A chat-completion provider. `open` returns once the provider accepted the call (status and
/// headers read); the stream then yields the reply. Dropping either aborts the request.
pub trait Provider: Send + Sync + 'static {
    fn open(&self, req: ChatRequest) -> BoxFuture<'_, Result<DeltaStream, ProviderError>>;
}
