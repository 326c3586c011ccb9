//! Sessions: what `GET`/`POST`/`PATCH /sessions…` carry, with their retry settings.
use super::text::words;
use super::{Message, Millis, RetryClass, Run, RunSummary, SessionId};
use serde::{Deserialize, Serialize};

words! {
    #[derive(Serialize, Deserialize, Default)]
    #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
    #[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
    #[serde(rename_all = "snake_case")]
    closed enum SessionStatus {
        #[default]
        Idle = "idle",
        Running = "running",
        /// Its active run waits for the operator to decide a tool call (CONTRACT §8).
        AwaitingApproval = "awaiting_approval",
    }
}

words! {
    /// Which tool calls of a session ask the operator first (CONTRACT §8).
    #[derive(Serialize, Deserialize, Default)]
    #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
    #[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
    #[serde(rename_all = "snake_case")]
    closed enum ApprovalMode {
        /// Each tool source's policy (`approval`, `approval_tools`) decides.
        #[default]
        Policy = "policy",
        /// Every call asks.
        AskAll = "ask_all",
        /// Nothing asks: every call runs.
        Trust = "trust",
    }
}

words! {
    /// What a remembered ("always") decision grants.
    #[derive(Serialize, Deserialize)]
    #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
    #[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
    #[serde(rename_all = "snake_case")]
    closed enum GrantDecision {
        Allow = "allow",
        Reject = "reject",
    }
}

/// An "always" decision the session remembers for one tool of one source.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct ToolGrant {
    pub server: String,
    pub tool: String,
    pub decision: GrantDecision,
}

words! {
    #[derive(Serialize, Deserialize, Default)]
    #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
    #[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
    #[serde(rename_all = "snake_case")]
    closed enum AutoRetry {
        #[default]
        Browser = "browser",
        Background = "background",
        Off = "off",
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct WaitingRetry {
    pub attempt: u32,
    #[cfg_attr(feature = "openapi", schema(value_type = i64))]
    pub fires_at: Millis,
    /// The class of the failure it retries.
    pub reason: RetryClass,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct Session {
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub id: SessionId,
    pub title: String,
    pub model: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub parent_id: Option<SessionId>,
    pub status: SessionStatus,
    #[cfg_attr(feature = "openapi", schema(value_type = i64))]
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
    /// This session's fallback chain, overriding the catalogue's (CONTRACT §7).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallbacks: Option<Vec<String>>,
    /// Which tool calls ask the operator first (CONTRACT §8).
    #[serde(default)]
    pub approval: ApprovalMode,
    /// What the operator's "always" decisions remembered for this session.
    #[serde(default)]
    pub tool_grants: Vec<ToolGrant>,
}

/// `POST /sessions` answers the session plus its agent token, shown this once.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct CreatedSession {
    #[serde(flatten)]
    pub session: Session,
    pub agent_token: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct SessionList {
    pub sessions: Vec<Session>,
    /// When more sessions follow this page: the `before` that asks for the next one (the
    /// page's last id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub next_before: Option<SessionId>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct SessionDetail {
    pub session: Session,
    pub messages: Vec<Message>,
    pub runs: Vec<Run>,
    /// The event id this snapshot is current to: resume the session's SSE after it.
    #[serde(default)]
    pub last_event_id: i64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct CreateSession {
    #[serde(default)]
    pub title: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub parent_id: Option<SessionId>,
    /// `browser` (default), `background` or `off`.
    #[serde(default)]
    pub auto_retry: Option<AutoRetry>,
    /// Tool sources by name; default every configured source plus `mulligan`.
    #[serde(default)]
    pub tools: Option<Vec<String>>,
    /// Models to fall back to, in order (default: the catalogue's chain for `model`).
    #[serde(default)]
    pub fallbacks: Option<Vec<String>>,
    /// `policy` (default), `ask_all` or `trust`.
    #[serde(default)]
    pub approval: Option<ApprovalMode>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct PatchSession {
    #[serde(default)]
    pub title: Option<String>,
    #[serde(default)]
    pub auto_retry: Option<AutoRetry>,
    #[serde(default)]
    pub tools: Option<Vec<String>>,
    /// A new fallback chain (`[]`: none).
    #[serde(default)]
    pub fallbacks: Option<Vec<String>>,
    #[serde(default)]
    pub approval: Option<ApprovalMode>,
    /// The remembered decisions that stay (`[]`: forget them all); only removals are taken.
    #[serde(default)]
    pub tool_grants: Option<Vec<ToolGrant>>,
}
