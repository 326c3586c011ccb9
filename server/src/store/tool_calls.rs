//! Tool calls of agent turns (CONTRACT §6): recorded when a call starts and again when it
//! ends, each in its own write before the turn goes on, so a retry never runs a recorded call
//! again and a call that started with no recorded end reads as `interrupted`.
use super::rows::Get;
use super::script::{Run as _, Script};
use super::{with_durable_writer, with_pool, with_writer, Pool, Store};
use super::{Result, StoreError};
use crate::clock::now_ms;
use app::wire::MessageId;
use app::wire::RunId;
use app::wire::SessionId;
use app::wire::{
    Approval, DecidedBy, Decision, Message, Part, Role, ToolAnnotations, ToolCall, ToolCallStatus,
};
use std::collections::HashMap;

/// A recorded call as the engine needs it: the wire call, the model's own id for it (sent
/// back with its result), and where it sits in its reply's text.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordedCall {
    pub call: ToolCall,
    pub message_id: MessageId,
    pub provider_id: String,
    /// Bytes of the reply's text that came before the call.
    pub text_offset: usize,
}

/// One call's row ($1 id … $18 annotations: see [`Store::push_call_insert`]).
const INSERT_CALL: &str =
    "INSERT INTO tool_calls (id, run_id, message_id, session_id, step, ord, provider_id,
         server, tool, arguments, text_offset, status, result, reached, started_at,
         finished_at, asked_at, annotations)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)";

/// A call a step asked for that is recorded only as its run parks for approval (CONTRACT
/// §8): one asking, or one queued behind it. Its run, reply and session are the run's own.
#[derive(Clone, Debug)]
pub struct AskedCall {
    pub ord: u32,
    pub provider_id: String,
    pub call: ToolCall,
    /// Bytes of the reply's text that came before the call.
    pub text_offset: usize,
}

/// A call about to be executed (or answered without executing it).
pub struct NewToolCall<'a> {
    pub run_id: &'a RunId,
    pub message_id: &'a MessageId,
    pub session_id: &'a SessionId,
    pub ord: u32,
    pub provider_id: &'a str,
    pub call: &'a ToolCall,
    pub text_offset: usize,
}

pub(super) fn recorded(row: &impl Get) -> RecordedCall {
    let status = ToolCallStatus::parse(&row.text("status")).unwrap_or(ToolCallStatus::Interrupted);
    let arguments = serde_json::from_str(&row.text("arguments")).unwrap_or(serde_json::Value::Null);
    let approval = row.opt_int("asked_at").map(|asked_at| Approval {
        asked_at,
        decision: row.opt_text("decision").and_then(|d| Decision::parse(&d)),
        reason: row.opt_text("reason"),
        decided_at: row.opt_int("decided_at"),
        by: row
            .opt_text("decided_by")
            .and_then(|b| DecidedBy::parse(&b)),
        from: row.opt_text("decided_from"),
    });
    let annotations = row
        .opt_text("annotations")
        .and_then(|a| serde_json::from_str::<ToolAnnotations>(&a).ok());
    RecordedCall {
        call: ToolCall {
            id: row.id("id"),
            step: u32::try_from(row.int("step")).unwrap_or(0),
            server: row.text("server"),
            tool: row.text("tool"),
            arguments,
            status,
            result: row.opt_text("result"),
            started_at: row.int("started_at"),
            finished_at: row.opt_int("finished_at"),
            approval,
            annotations,
        },
        message_id: row.id("message_id"),
        provider_id: row.text("provider_id"),
        text_offset: usize::try_from(row.int("text_offset")).unwrap_or(0),
    }
}

impl Store {
    /// Records a call as it starts (`running`: it is about to be sent, and counts as
    /// executed on its run from now on, so a crash mid-call never lets a retry send it
    /// again), or already ended when it is answered without a tool server (an unknown tool,
    /// malformed arguments).
    pub async fn tool_call_started(&self, c: &NewToolCall<'_>) -> Result<()> {
        self.record_calls(std::slice::from_ref(c)).await
    }

    /// Records several calls of one run in one transaction (a step's calls, asked together:
    /// CONTRACT §8), under the same fence as [`Store::tool_call_started`].
    pub async fn record_calls(&self, calls: &[NewToolCall<'_>]) -> Result<()> {
        let Some(first) = calls.first() else {
            return Ok(());
        };
        let run_id = first.run_id.as_str();
        let sent = calls
            .iter()
            .filter(|c| c.call.status == ToolCallStatus::Running)
            .count();
        let fenced = self.is_shared().then(super::shared::fence_sql);
        with_durable_writer!(self, |pool| {
            let mut tx = pool.begin().await?;
            // Several instances: only while the run is still `running` and its instance's
            // lease is live by the database's clock; the run's row stays locked until the
            // commit, so no takeover falls between. An instance that lost its lease (paused,
            // partitioned) records no call, and so executes none.
            if let Some(sql) = &fenced {
                let held: Option<i64> = sqlx::query_scalar(sql)
                    .bind(run_id)
                    .fetch_optional(&mut *tx)
                    .await?;
                if held.is_none() {
                    crate::metrics::metrics().fenced_write();
                    return Err(StoreError::conflict(
                        "this instance no longer holds the lease on this run",
                    ));
                }
            }
            let mut script = Script::default();
            for c in calls {
                self.push_call_insert(&mut script, c);
            }
            if sent > 0 {
                script.push(
                    "UPDATE runs SET tools_executed = tools_executed + $2 WHERE id = $1",
                    vec![
                        run_id.into(),
                        i64::try_from(sent).unwrap_or(i64::MAX).into(),
                    ],
                );
            }
            (&mut *tx).run(script).await?;
            tx.commit().await?;
            Ok(())
        })
    }

    /// Adds the insert of call `c` to `script` (its transaction's caller checks the fence).
    pub(super) fn push_call_insert(&self, script: &mut Script, c: &NewToolCall<'_>) {
        let arguments = serde_json::to_string(&c.call.arguments).unwrap_or_else(|_| "null".into());
        let annotations = c
            .call
            .annotations
            .filter(|a| !a.is_empty())
            .and_then(|a| serde_json::to_string(&a).ok());
        let reached = c.call.status == ToolCallStatus::Running;
        script.push(
            INSERT_CALL,
            vec![
                c.call.id.as_str().into(),
                c.run_id.into(),
                c.message_id.into(),
                c.session_id.into(),
                i64::from(c.call.step).into(),
                i64::from(c.ord).into(),
                c.provider_id.into(),
                c.call.server.as_str().into(),
                c.call.tool.as_str().into(),
                arguments.into(),
                i64::try_from(c.text_offset).unwrap_or(i64::MAX).into(),
                c.call.status.as_str().into(),
                self.storable_opt(c.call.result.as_deref()).into(),
                i64::from(reached).into(),
                c.call.started_at.into(),
                c.call.finished_at.into(),
                c.call.approval.as_ref().map(|a| a.asked_at).into(),
                annotations.into(),
            ],
        );
    }

    /// Records a call's end. `not_sent`: it never reached its server after all (the server
    /// was not ready), so it no longer counts as executed. `conflict` when the call is no
    /// longer its run's to end: the run's end recorded it already, or (shared database) the
    /// lease the run was started under is gone.
    pub async fn tool_call_ended(
        &self,
        call: &ToolCall,
        run_id: &RunId,
        not_sent: bool,
    ) -> Result<()> {
        let sql: &'static str = if self.is_shared() {
            &END_CALL_FENCED
        } else {
            END_CALL
        };
        let arguments = serde_json::to_string(&call.arguments).unwrap_or_else(|_| "null".into());
        with_writer!(self, |pool| {
            let mut tx = pool.begin().await?;
            let n = sqlx::query(sql)
                .bind(call.status.as_str())
                .bind(self.storable_opt(call.result.as_deref()))
                .bind(call.finished_at.unwrap_or_else(now_ms))
                .bind(i64::from(not_sent))
                .bind(call.id.as_str())
                .bind(call.tool.as_str())
                .bind(arguments.as_str())
                .execute(&mut *tx)
                .await?
                .rows_affected();
            if n == 0 {
                if self.is_shared() {
                    crate::metrics::metrics().fenced_write();
                }
                return Err(StoreError::conflict(
                    "this tool call is no longer this instance's to record: its run ended or its lease lapsed",
                ));
            }
            if not_sent {
                sqlx::query(
                    "UPDATE runs SET tools_executed = tools_executed - 1
                     WHERE id = $1 AND tools_executed > 0",
                )
                .bind(run_id.as_str())
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
            Ok(())
        })
    }

    /// Every recorded call of a session's messages, by message, in the order asked for.
    pub async fn tool_calls_of_session(
        &self,
        session_id: &SessionId,
    ) -> Result<HashMap<MessageId, Vec<RecordedCall>>> {
        let rows: Vec<RecordedCall> = with_pool!(self, |pool| {
            sqlx::query("SELECT * FROM tool_calls WHERE session_id = $1 ORDER BY message_id, ord")
                .bind(session_id.as_str())
                .fetch_all(pool)
                .await?
                .iter()
                .map(recorded)
                .collect()
        });
        let mut by_message: HashMap<MessageId, Vec<RecordedCall>> = HashMap::new();
        for r in rows {
            by_message.entry(r.message_id.clone()).or_default().push(r);
        }
        Ok(by_message)
    }

    /// The recorded calls of one message, in the order asked for.
    pub async fn tool_calls_of_message(&self, message_id: &MessageId) -> Result<Vec<RecordedCall>> {
        Ok(with_pool!(self, |pool| {
            sqlx::query("SELECT * FROM tool_calls WHERE message_id = $1 ORDER BY ord")
                .bind(message_id.as_str())
                .fetch_all(pool)
                .await?
                .iter()
                .map(recorded)
                .collect()
        }))
    }

    /// Fills `parts` of the agent messages that made tool calls (one query per session).
    pub async fn with_parts(&self, session_id: &SessionId, messages: &mut [Message]) -> Result<()> {
        if !messages.iter().any(|m| m.role == Role::Agent) {
            return Ok(());
        }
        let mut calls = self.tool_calls_of_session(session_id).await?;
        for m in messages.iter_mut() {
            if let Some(calls) = calls.remove(&m.id) {
                m.parts = Some(parts(&m.content, &calls));
            }
        }
        Ok(())
    }

    /// Fills `parts` of one message.
    pub async fn with_parts_of(&self, message: &mut Message) -> Result<()> {
        if message.role != Role::Agent {
            return Ok(());
        }
        let calls = self.tool_calls_of_message(&message.id).await?;
        if !calls.is_empty() {
            message.parts = Some(parts(&message.content, &calls));
        }
        Ok(())
    }
}

/// A reply's parts from its text and its recorded calls.
pub fn parts(content: &str, calls: &[RecordedCall]) -> Vec<Part> {
    let split: Vec<(usize, ToolCall)> = calls
        .iter()
        .map(|c| (c.text_offset, c.call.clone()))
        .collect();
    app::wire::parts_of(content, &split)
}

/// A call's end ($1 status, $2 result, $3 finished at, $4 not sent, $5 call, $6 tool, $7
/// arguments: an agent's call says what it was as it goes), only while it is `running`: a
/// call its run's end already recorded `interrupted` or `cancelled` stays so.
const END_CALL: &str = "UPDATE tool_calls SET status = $1, result = $2, finished_at = $3,
         reached = CASE WHEN $4 = 1 THEN 0 ELSE reached END, tool = $6, arguments = $7
     WHERE id = $5 AND status = 'running'";

/// [`END_CALL`] only while the call's run is `running` under a live lease (fencing).
static END_CALL_FENCED: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "{END_CALL} AND EXISTS (SELECT 1 FROM runs r
             WHERE r.id = tool_calls.run_id AND r.status = 'running' AND {})",
        super::shared::lease_live("r")
    )
});
