//! Runs: one execution of a turn, its Tier 1 attempts, its classification and provenance.
use super::text::words;
use super::{MessageId, Millis, PromptId, RunId, SessionId};
use serde::{Deserialize, Serialize};

words! {
    #[derive(Serialize, Deserialize)]
    #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
    #[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
    #[serde(rename_all = "snake_case")]
    closed enum RunStatus {
        Queued = "queued",
        Running = "running",
        /// At least one of its tool calls waits for the operator's decision (CONTRACT §8):
        /// no task, no provider request, no connection holds it; a decision resumes it.
        AwaitingApproval = "awaiting_approval",
        Completed = "completed",
        Failed = "failed",
        Cancelled = "cancelled",
    }
}

impl RunStatus {
    pub fn is_active(self) -> bool {
        matches!(
            self,
            RunStatus::Queued | RunStatus::Running | RunStatus::AwaitingApproval
        )
    }
}

words! {
    #[derive(Serialize, Deserialize)]
    #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
    #[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
    #[serde(rename_all = "snake_case")]
    closed enum RunKind {
        Prompt = "prompt",
        Regenerate = "regenerate",
        Resend = "resend",
        Continuation = "continuation",
    }
}

words! {
    /// Why a run failed (CONTRACT §2 `retry_class`). Open: a class this build does not know
    /// (an old row, a newer server) decodes to `Other` with its word, is not retryable, and
    /// encodes back to the same word.
    open enum RetryClass {
        RateLimited = "rate_limited",
        Overloaded = "overloaded",
        ServerError = "server_error",
        Network = "network",
        StreamInterrupted = "stream_interrupted",
        /// The server stopped mid-run.
        Interrupted = "interrupted",
        /// The provider did not answer in time.
        Timeout = "timeout",
        /// Mulligan itself failed the run.
        Internal = "internal",
        ContextOverflow = "context_overflow",
        AuthFailed = "auth_failed",
        CredentialsUnresolved = "credentials_unresolved",
        SpendLimitExceeded = "spend_limit_exceeded",
        QuotaExhausted = "quota_exhausted",
        InvalidRequest = "invalid_request",
        MaxSteps = "max_steps",
        ReplyTooLarge = "reply_too_large",
        /// An ACP agent's process exited mid-turn (CONTRACT §9).
        AgentExited = "agent_exited",
        /// An ACP agent failed the turn for a reason of its own (CONTRACT §9).
        AgentError = "agent_error",
    }
}

impl RetryClass {
    /// Whether a failure of this class may be retried (Tier 2 arms only on these); an
    /// unknown class is not.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            RetryClass::RateLimited
                | RetryClass::Overloaded
                | RetryClass::ServerError
                | RetryClass::Network
                | RetryClass::StreamInterrupted
                | RetryClass::Interrupted
                | RetryClass::Timeout
                | RetryClass::Internal
                | RetryClass::AgentExited
        )
    }
}

words! {
    /// Why a run exists when it is not the operator's own prompt (`Provenance.kind`). Open:
    /// an unknown kind decodes to `Other` with its word and encodes back to it.
    open enum ProvenanceKind {
        Operator = "operator",
        Regenerate = "regenerate",
        /// A retry-now or background retry: a resend or a continuation of a failed turn.
        AutoResume = "auto_resume",
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct Run {
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub id: RunId,
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub session_id: SessionId,
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub anchor_message_id: MessageId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub reply_message_id: Option<MessageId>,
    pub status: RunStatus,
    pub kind: RunKind,
    pub attempt: u32,
    pub tier1_attempts: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub held_by: Option<RunId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryClassification>,
    /// When the operator cancelled Tier 2 for this failed run: no page arms it again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<i64>))]
    pub retry_dismissed_at: Option<Millis>,
    #[cfg_attr(feature = "openapi", schema(value_type = i64))]
    pub created_at: Millis,
    /// Why this run exists when it is not the operator's own prompt (regenerate, retry).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provenance: Option<Provenance>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<i64>))]
    pub started_at: Option<Millis>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<i64>))]
    pub finished_at: Option<Millis>,
    /// Model steps begun in this run.
    #[serde(default)]
    pub steps: u32,
    /// Tool calls of this run that reached a tool server.
    #[serde(default)]
    pub tools_executed: u32,
    /// Which model answered each step, and what it fell back from (CONTRACT §7).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub served: Vec<super::Served>,
    /// Why an agent ended a completed turn when it was not simply done (CONTRACT §9):
    /// `max_tokens`, `max_turn_requests`, `refusal` (`other` for one this build does not know).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
}

impl Run {
    pub fn summary(&self) -> RunSummary {
        RunSummary {
            id: self.id.clone(),
            status: self.status,
            kind: self.kind,
            retry: self.retry.clone(),
            error_message: self.error_message.clone(),
            created_at: Some(self.created_at),
            finished_at: self.finished_at,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct RunSummary {
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub id: RunId,
    pub status: RunStatus,
    pub kind: RunKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryClassification>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
    /// When the run was asked for (its prompt, regenerate or retry).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<i64>))]
    pub created_at: Option<Millis>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<i64>))]
    pub finished_at: Option<Millis>,
}

/// How a failed run may be retried; persisted on the run and on its reply.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct RetryClassification {
    pub retryable: bool,
    pub retry_class: RetryClass,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<i64>))]
    pub retry_after_until: Option<Millis>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct Provenance {
    pub kind: ProvenanceKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub prompt_id: Option<PromptId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manual: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct Attempt {
    pub n: u32,
    #[cfg_attr(feature = "openapi", schema(value_type = i64))]
    pub started_at: Millis,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_in_ms: Option<i64>,
    /// The `<provider>/<model>` this attempt asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct RunDetail {
    pub run: Run,
    pub attempts: Vec<Attempt>,
    /// The tool calls of the run's reply, in the order asked for (its timeline's tools).
    #[serde(default)]
    pub tool_calls: Vec<super::ToolCall>,
    /// The instance that executed it, where several share the database (none on SQLite).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
}

/// `POST /sessions/:sid/retry` answers this.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct RetryReceipt {
    /// `<prompt id>~resume-<n>`: which attempt of which prompt this is.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub prompt_id: PromptId,
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub run_id: RunId,
    pub kind: RunKind,
}

/// `POST /sessions/:sid/release` answers this: the held runs that may now go on.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct Released {
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<String>))]
    pub released: Vec<RunId>,
}
