//! Messages: operator prompts and agent replies, and the bodies that post or regenerate them.
use super::text::words;
use super::{MessageId, Millis, Part, Provenance, RetryClassification, RunId, SessionId};
use serde::{Deserialize, Serialize};

words! {
    #[derive(Serialize, Deserialize)]
    #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
    #[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
    #[serde(rename_all = "snake_case")]
    closed enum Role {
        Operator = "operator",
        Agent = "agent",
    }
}

words! {
    #[derive(Serialize, Deserialize)]
    #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
    #[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
    #[serde(rename_all = "snake_case")]
    closed enum MessageStatus {
        Streaming = "streaming",
        Complete = "complete",
        Failed = "failed",
        Cancelled = "cancelled",
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct Message {
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub id: MessageId,
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub session_id: SessionId,
    pub role: Role,
    pub content: String,
    #[cfg_attr(feature = "openapi", schema(value_type = i64))]
    pub created_at: Millis,
    pub superseded: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub run_id: Option<RunId>,
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

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct PostMessage {
    pub content: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct Receipt {
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub message_id: MessageId,
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub run_id: RunId,
    pub queued: bool,
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<String>))]
    pub superseded: Vec<MessageId>,
    /// Regenerate: the tool calls the superseded replies had executed (they may run again).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tools_superseded: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct Regenerate {
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub if_last_run: Option<RunId>,
    /// An operator's click on a reply (not Tier 2): `if_last_run` may then name any ended
    /// run (a completed or stopped reply the operator saw), still only while it is the
    /// anchor's latest; and the call is not counted as a Tier 2 retry.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub manual: bool,
    /// The browser tab whose Tier 2 asks (its [`is_tab_id`] id), kept as the new run's
    /// `provenance.from`, so a run's timeline can say "this tab" or "another tab".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
}

/// Whether `s` is a browser tab's id as the page makes one: `tab-` and 1 to 32 lowercase
/// letters, digits or dashes.
pub fn is_tab_id(s: &str) -> bool {
    s.strip_prefix("tab-").is_some_and(|rest| {
        (1..=32).contains(&rest.len())
            && rest
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    })
}

/// Message `content` limit, in chars after trim (CONTRACT §2).
pub const MAX_CONTENT_CHARS: usize = 100_000;
