//! Mapping between SQLite rows and the wire types.
use app::wire::{
    Message, MessageStatus, Provenance, RetryClassification, Role, Run, RunKind, RunStatus,
};
use sqlx::sqlite::SqliteRow;
use sqlx::Row;

pub fn run_status(s: &str) -> RunStatus {
    match s {
        "queued" => RunStatus::Queued,
        "running" => RunStatus::Running,
        "completed" => RunStatus::Completed,
        "cancelled" => RunStatus::Cancelled,
        _ => RunStatus::Failed,
    }
}

pub fn run_status_str(s: RunStatus) -> &'static str {
    match s {
        RunStatus::Queued => "queued",
        RunStatus::Running => "running",
        RunStatus::Completed => "completed",
        RunStatus::Failed => "failed",
        RunStatus::Cancelled => "cancelled",
    }
}

pub fn run_kind(s: &str) -> RunKind {
    match s {
        "regenerate" => RunKind::Regenerate,
        "resend" => RunKind::Resend,
        "continuation" => RunKind::Continuation,
        _ => RunKind::Prompt,
    }
}

pub fn run_kind_str(k: RunKind) -> &'static str {
    match k {
        RunKind::Prompt => "prompt",
        RunKind::Regenerate => "regenerate",
        RunKind::Resend => "resend",
        RunKind::Continuation => "continuation",
    }
}

pub fn message_status_str(s: MessageStatus) -> &'static str {
    match s {
        MessageStatus::Streaming => "streaming",
        MessageStatus::Complete => "complete",
        MessageStatus::Failed => "failed",
        MessageStatus::Cancelled => "cancelled",
    }
}

fn message_status(s: &str) -> MessageStatus {
    match s {
        "streaming" => MessageStatus::Streaming,
        "complete" => MessageStatus::Complete,
        "cancelled" => MessageStatus::Cancelled,
        _ => MessageStatus::Failed,
    }
}

fn retry(row: &SqliteRow) -> Option<RetryClassification> {
    let class: Option<String> = row.get("retry_class");
    class.map(|retry_class| RetryClassification {
        retryable: row.get::<Option<bool>, _>("retryable").unwrap_or(false),
        retry_class,
        retry_after_until: row.get("retry_after_until"),
    })
}

fn provenance(row: &SqliteRow) -> Option<Provenance> {
    let raw: Option<String> = row.get("provenance");
    raw.and_then(|p| serde_json::from_str(&p).ok())
}

pub fn provenance_json(p: &Option<Provenance>) -> Option<String> {
    p.as_ref()
        .map(|p| serde_json::to_string(p).expect("provenance serializes"))
}

/// Columns: messages.* plus `superseded` (0/1).
pub fn message(row: &SqliteRow) -> Message {
    let role: String = row.get("role");
    Message {
        id: row.get("id"),
        session_id: row.get("session_id"),
        role: if role == "operator" {
            Role::Operator
        } else {
            Role::Agent
        },
        content: row.get("content"),
        created_at: row.get("created_at"),
        superseded: row.get("superseded"),
        run_id: row.get("run_id"),
        status: row
            .get::<Option<String>, _>("status")
            .map(|s| message_status(&s)),
        error_message: row.get("error_message"),
        retry: retry(row),
        provenance: provenance(row),
        delta_seq: None,
    }
}

/// Columns: runs.*.
pub fn run(row: &SqliteRow) -> Run {
    Run {
        id: row.get("id"),
        session_id: row.get("session_id"),
        anchor_message_id: row.get("anchor_message_id"),
        reply_message_id: row.get("reply_message_id"),
        status: run_status(row.get("status")),
        kind: run_kind(row.get("kind")),
        attempt: row.get::<i64, _>("attempt") as u32,
        tier1_attempts: row.get::<i64, _>("tier1_attempts") as u32,
        held_by: row.get("held_by"),
        error_message: row.get("error_message"),
        retry: retry(row),
        created_at: row.get("created_at"),
        provenance: provenance(row),
        started_at: row.get("started_at"),
        finished_at: row.get("finished_at"),
    }
}
