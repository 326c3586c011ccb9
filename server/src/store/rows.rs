//! Mapping between database rows (SQLite or PostgreSQL) and the wire types.
use app::wire::{
    Id, Message, MessageStatus, Provenance, RetryClass, RetryClassification, Role, Run, RunKind,
    RunStatus, Word,
};
use sqlx::postgres::PgRow;
use sqlx::sqlite::SqliteRow;
use sqlx::Row;

/// Typed column reads that both backends' rows answer, so each mapping is written once.
pub trait Get {
    fn text(&self, column: &str) -> String;
    fn opt_text(&self, column: &str) -> Option<String>;
    fn int(&self, column: &str) -> i64;
    fn opt_int(&self, column: &str) -> Option<i64>;
    fn flag(&self, column: &str) -> bool;
    fn opt_flag(&self, column: &str) -> Option<bool>;
    /// An id this store wrote.
    fn id<T: Id>(&self, column: &str) -> T {
        T::stored(self.text(column))
    }
    fn opt_id<T: Id>(&self, column: &str) -> Option<T> {
        self.opt_text(column).map(T::stored)
    }
}

/// Reads a column; a value of the wrong type is logged and read as `fallback`, so that one
/// bad row never takes down a page or a list. An integer column holding a REAL (SQLite
/// turns an overflowing sum into one) reads as the nearest integer.
macro_rules! impl_get {
    ($row:ty) => {
        impl Get for $row {
            fn text(&self, column: &str) -> String {
                read(self.try_get(column), column).unwrap_or_default()
            }
            fn opt_text(&self, column: &str) -> Option<String> {
                read(self.try_get(column), column).flatten()
            }
            fn int(&self, column: &str) -> i64 {
                self.opt_int(column).unwrap_or(0)
            }
            fn opt_int(&self, column: &str) -> Option<i64> {
                match self.try_get::<Option<i64>, _>(column) {
                    Ok(v) => v,
                    // `as` saturates: NaN reads 0, ±inf the ends of i64.
                    Err(_) => read(self.try_get::<Option<f64>, _>(column), column)
                        .flatten()
                        .map(|f| f as i64),
                }
            }
            fn flag(&self, column: &str) -> bool {
                read(self.try_get(column), column).unwrap_or_default()
            }
            fn opt_flag(&self, column: &str) -> Option<bool> {
                read(self.try_get(column), column).flatten()
            }
        }
    };
}

/// A column's value, or `None` with the reason logged. A column the query does not select is
/// Mulligan's own bug, not bad data: debug builds (the tests) fail on it at once.
fn read<T>(value: Result<T, sqlx::Error>, column: &str) -> Option<T> {
    value
        .map_err(|e| {
            debug_assert!(
                !matches!(e, sqlx::Error::ColumnNotFound(_)),
                "the query does not select `{column}`: {e}"
            );
            tracing::error!(column, error = %e, "a stored value could not be read");
        })
        .ok()
}

impl_get!(SqliteRow);
impl_get!(PgRow);

/// A joined table's columns, selected under a prefix (`lr_id` read as `id`), so the one
/// mapping of that table reads them.
pub struct Prefixed<'a, R>(pub &'a R, pub &'static str);

impl<R: Get> Get for Prefixed<'_, R> {
    fn text(&self, column: &str) -> String {
        self.0.text(&format!("{}{column}", self.1))
    }
    fn opt_text(&self, column: &str) -> Option<String> {
        self.0.opt_text(&format!("{}{column}", self.1))
    }
    fn int(&self, column: &str) -> i64 {
        self.0.int(&format!("{}{column}", self.1))
    }
    fn opt_int(&self, column: &str) -> Option<i64> {
        self.0.opt_int(&format!("{}{column}", self.1))
    }
    fn flag(&self, column: &str) -> bool {
        self.0.flag(&format!("{}{column}", self.1))
    }
    fn opt_flag(&self, column: &str) -> Option<bool> {
        self.0.opt_flag(&format!("{}{column}", self.1))
    }
}

/// The runs columns [`run`] reads, each as `lr_<column>` of the alias `lr` (a session's
/// last run, joined to its row).
pub const LAST_RUN_COLUMNS: &str = "lr.id AS lr_id, lr.session_id AS lr_session_id,
    lr.anchor_message_id AS lr_anchor_message_id, lr.reply_message_id AS lr_reply_message_id,
    lr.status AS lr_status, lr.kind AS lr_kind, lr.attempt AS lr_attempt,
    lr.tier1_attempts AS lr_tier1_attempts, lr.held_by AS lr_held_by,
    lr.error_message AS lr_error_message, lr.retryable AS lr_retryable,
    lr.retry_class AS lr_retry_class, lr.retry_after_until AS lr_retry_after_until,
    lr.created_at AS lr_created_at, lr.provenance AS lr_provenance,
    lr.started_at AS lr_started_at, lr.finished_at AS lr_finished_at,
    lr.retry_dismissed_at AS lr_retry_dismissed_at, lr.steps AS lr_steps,
    lr.tools_executed AS lr_tools_executed, lr.served AS lr_served,
    lr.stop_reason AS lr_stop_reason";

/// A word column read as its enum (`status`, `kind`, `role`, `retry_class`, …), with the
/// enum's own word table: the one mapping of every enum to its stored text. A word this build
/// does not know is logged and read as `fallback`, so one bad row never breaks a list (an
/// open enum keeps it instead, in its `Other` variant).
pub fn word<T: Word>(row: &impl Get, column: &str, fallback: T) -> T {
    let text = row.text(column);
    T::parse(&text).unwrap_or_else(|| {
        tracing::error!(column, value = %text, "a stored value is not a known word");
        fallback
    })
}

/// [`word`] for a column that may be NULL.
fn opt_word<T: Word>(row: &impl Get, column: &str, fallback: T) -> Option<T> {
    row.opt_text(column).map(|text| {
        T::parse(&text).unwrap_or_else(|| {
            tracing::error!(column, value = %text, "a stored value is not a known word");
            fallback
        })
    })
}

fn retry(row: &impl Get) -> Option<RetryClassification> {
    row.opt_text("retry_class")
        .map(|class| RetryClassification {
            retryable: row.opt_flag("retryable").unwrap_or(false),
            retry_class: RetryClass::parse(&class),
            retry_after_until: row.opt_int("retry_after_until"),
        })
}

fn provenance(row: &impl Get) -> Option<Provenance> {
    row.opt_text("provenance")
        .and_then(|p| serde_json::from_str(&p).ok())
}

pub fn provenance_json(p: &Option<Provenance>) -> Option<String> {
    p.as_ref()
        .map(|p| serde_json::to_string(p).expect("provenance serializes"))
}

/// Columns: messages.* plus `superseded` (0/1).
/// Columns: messages.* plus `superseded`. A streaming reply carries how many deltas its
/// stored text holds, so a snapshot and a resumed event stream never double one.
pub fn message(row: &impl Get) -> Message {
    let status = opt_word(row, "status", MessageStatus::Failed);
    Message {
        id: row.id("id"),
        session_id: row.id("session_id"),
        role: word(row, "role", Role::Agent),
        content: row.text("content"),
        created_at: row.int("created_at"),
        superseded: row.flag("superseded"),
        run_id: row.opt_id("run_id"),
        delta_seq: match status {
            Some(MessageStatus::Streaming) => Some(row.int("delta_seq") as u64),
            _ => None,
        },
        status,
        error_message: row.opt_text("error_message"),
        retry: retry(row),
        provenance: provenance(row),
        parts: None,
    }
}

/// A session's tool sources: its JSON list; a session made before tools existed has the
/// built-in source only.
pub fn tools(row: &impl Get) -> Vec<String> {
    tools_in(row, "tools")
}

/// A session's tool sources from column `column` (JSON); the built-in tools when unset.
fn tools_in(row: &impl Get, column: &str) -> Vec<String> {
    row.opt_text(column)
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_else(|| vec![app::wire::BUILTIN_SOURCE.to_string()])
}

/// Columns: `session_model`, `session_tokens_used`, `session_tools`, `session_fallbacks`
/// (a started run's row).
pub fn session_call(row: &impl Get) -> super::SessionCall {
    super::SessionCall {
        model: row.text("session_model"),
        tokens_used: row.int("session_tokens_used"),
        tools: tools_in(row, "session_tools"),
        fallbacks: row
            .opt_text("session_fallbacks")
            .map(|_| json_list(row, "session_fallbacks")),
        approval: word(row, "session_approval", Default::default()),
        tool_grants: json_list(row, "session_tool_grants"),
    }
}

/// Columns: runs.*.
pub fn run(row: &impl Get) -> Run {
    Run {
        id: row.id("id"),
        session_id: row.id("session_id"),
        anchor_message_id: row.id("anchor_message_id"),
        reply_message_id: row
            .opt_text("reply_message_id")
            .map(app::wire::MessageId::new),
        status: word(row, "status", RunStatus::Failed),
        kind: word(row, "kind", RunKind::Prompt),
        attempt: row.int("attempt") as u32,
        tier1_attempts: row.int("tier1_attempts") as u32,
        held_by: row.opt_id("held_by"),
        error_message: row.opt_text("error_message"),
        retry: retry(row),
        retry_dismissed_at: row.opt_int("retry_dismissed_at"),
        created_at: row.int("created_at"),
        provenance: provenance(row),
        started_at: row.opt_int("started_at"),
        finished_at: row.opt_int("finished_at"),
        steps: u32::try_from(row.int("steps")).unwrap_or(0),
        tools_executed: u32::try_from(row.int("tools_executed")).unwrap_or(0),
        served: json_list(row, "served"),
        stop_reason: row.opt_text("stop_reason"),
    }
}

/// A JSON array kept in text column `column`; a value this build cannot read (an old or
/// damaged row) is logged and read as empty, so one bad row never breaks a page.
pub fn json_list<T: serde::de::DeserializeOwned>(row: &impl Get, column: &str) -> Vec<T> {
    let Some(text) = row.opt_text(column) else {
        return Vec::new();
    };
    serde_json::from_str(&text).unwrap_or_else(|e| {
        tracing::warn!(column, error = %e, "a stored list could not be read; shown as empty");
        Vec::new()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A row of text columns.
    struct Words(HashMap<&'static str, &'static str>);

    impl Get for Words {
        fn text(&self, column: &str) -> String {
            self.opt_text(column).unwrap_or_default()
        }
        fn opt_text(&self, column: &str) -> Option<String> {
            self.0.get(column).map(|v| v.to_string())
        }
        fn int(&self, _: &str) -> i64 {
            0
        }
        fn opt_int(&self, _: &str) -> Option<i64> {
            None
        }
        fn flag(&self, _: &str) -> bool {
            false
        }
        fn opt_flag(&self, _: &str) -> Option<bool> {
            None
        }
    }

    #[test]
    fn an_unknown_stored_word_never_breaks_a_row() {
        let row = Words(HashMap::from([
            ("status", "paused"),
            ("kind", "replay"),
            ("retry_class", "solar_flare"),
        ]));
        let run = run(&row);
        assert_eq!((run.status, run.kind), (RunStatus::Failed, RunKind::Prompt));
        let retry = run.retry.expect("classified");
        assert_eq!(retry.retry_class, RetryClass::Other("solar_flare".into()));
        let known = Words(HashMap::from([("status", "running"), ("kind", "resend")]));
        let run = super::run(&known);
        assert_eq!(
            (run.status, run.kind),
            (RunStatus::Running, RunKind::Resend)
        );
    }
}
