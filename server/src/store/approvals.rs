//! Approval before a tool acts (CONTRACT §8): a run parked `awaiting_approval` (state in the
//! database, nothing else holds it), a decision recorded once (a compare-and-set on the
//! call), the run resumed by whichever instance records the last decision, the calls waiting.
use super::rows::{self, Get};
use super::script::{Run as _, Script};
use super::starts::session_call_columns;
use super::tool_calls::{recorded, NewToolCall};
use super::{
    with_durable_writer, with_pool, with_writer, Pool, RecordedCall, Result, Started, Store,
    StoreError,
};
use crate::clock::now_ms;
use app::wire::{
    DecidedBy, Decision, GrantDecision, Message, Run, RunId, SessionId, ToolCallId, ToolCallStatus,
    ToolGrant, WaitingCall,
};
use sqlx::Row;

/// What a decision is, as the engine checked it.
pub struct NewDecision<'a> {
    pub decision: Decision,
    pub reason: Option<&'a str>,
    pub by: Option<DecidedBy>,
    pub from: Option<&'a str>,
    /// What a rejected call's result says (the model reads it).
    pub declined: String,
}

/// Why a decision was not recorded.
pub enum NotDecided {
    /// The call was decided already: as it is now.
    Decided(Box<RecordedCall>),
    /// The call waits for no decision (it ran, runs, or ended with its run).
    NotWaiting(Box<RecordedCall>),
}

/// A decision recorded: the call as decided, and its session.
pub struct Decided {
    pub call: RecordedCall,
    pub session_id: SessionId,
}

/// A run's parking ($1 tokens, $2 served, $3 now, $4 run), only while it runs.
const PARK_RUN: &str = "UPDATE runs SET status = 'awaiting_approval',
         tokens_used = tokens_used + $1, served = COALESCE($2, served),
         active_ms = active_ms + MAX(0, $3 - COALESCE(resumed_at, started_at, $3))
     WHERE id = $4 AND status = 'running'";

/// The call's decision ($1 decision, $2 reason, $3 now, $4 by, $5 from, $6 status,
/// $7 result, $8 call, $9 run), only while it waits undecided.
const DECIDE: &str = "UPDATE tool_calls SET decision = $1, reason = $2, decided_at = $3,
         decided_by = $4, decided_from = $5, status = $6, result = COALESCE($7, result),
         finished_at = CASE WHEN $6 = 'denied' THEN $3 ELSE finished_at END
     WHERE id = $8 AND run_id = $9 AND status = 'awaiting_approval' AND decision IS NULL
     RETURNING *";

/// Run $1 back to `running` at $2 for instance $3 once none of its calls waits undecided.
const RESUME_RUN: &str = concat!(
    "UPDATE runs SET status = 'running', resumed_at = $2, owner = $3,
         owner_epoch = COALESCE((SELECT epoch FROM instances WHERE id = $3), 0)
     WHERE id = $1 AND status = 'awaiting_approval'
       AND NOT EXISTS (SELECT 1 FROM tool_calls c WHERE c.run_id = $1
                       AND c.status = 'awaiting_approval' AND c.decision IS NULL)
     RETURNING *, ",
    session_call_columns!()
);

/// A call of a resumed run about to be sent ($1 now, $2 call): only a queued or allowed one.
const CALL_SENT: &str = "UPDATE tool_calls SET status = 'running', started_at = $1, reached = 1
     WHERE id = $2 AND (status = 'queued'
         OR (status = 'awaiting_approval' AND decision IN ('allow_once', 'allow_always')))";

/// PostgreSQL spells SQLite's two-argument `MAX` as `GREATEST`.
fn sql_for(store: &Store, sql: &'static str) -> std::borrow::Cow<'static, str> {
    if store.is_shared() {
        sql.replace("MAX(0,", "GREATEST(0,").into()
    } else {
        sql.into()
    }
}

impl Store {
    /// Parks a running run `awaiting_approval` with the calls its last step asked for, in
    /// one transaction (so no crash leaves a step's calls recorded with its run not waiting,
    /// to be asked again): the calls, its reply's text so far, its tokens (counted to the
    /// session now), who served its steps, and the time it executed. `None` when it is no
    /// longer running here (ended, or fenced): nothing is recorded.
    pub async fn park_run(
        &self,
        run_id: &RunId,
        calls: &[NewToolCall<'_>],
        content: &str,
        tokens: i64,
        served: &[app::wire::Served],
    ) -> Result<Option<(Run, Option<Message>)>> {
        let mut inserts = Script::default();
        for c in calls {
            self.push_call_insert(&mut inserts, c);
        }
        let served = (!served.is_empty())
            .then(|| serde_json::to_string(served).ok())
            .flatten();
        let park = sql_for(self, PARK_RUN);
        let park = if self.is_shared() {
            format!(
                "{park} AND {} RETURNING *",
                super::shared::lease_live("runs")
            )
        } else {
            format!("{park} RETURNING *")
        };
        let now = now_ms();
        with_writer!(self, |pool| {
            let mut tx = pool.begin().await?;
            let Some(row) = sqlx::query(&park)
                .bind(tokens)
                .bind(served)
                .bind(now)
                .bind(run_id.as_str())
                .fetch_optional(&mut *tx)
                .await?
            else {
                tx.rollback().await?;
                return Ok(None);
            };
            let run = rows::run(&row);
            (&mut *tx).run(inserts).await?;
            let reply = sqlx::query(
                "UPDATE messages SET content = $1 WHERE id = (SELECT reply_message_id FROM runs WHERE id = $2)
                 RETURNING *, EXISTS (SELECT 1 FROM supersessions x WHERE x.message_id = messages.id) AS superseded",
            )
            .bind(self.storable(content))
            .bind(run_id.as_str())
            .fetch_optional(&mut *tx)
            .await?
            .map(|r| rows::message(&r));
            sqlx::query("UPDATE sessions SET tokens_used = tokens_used + $1 WHERE id = $2")
                .bind(tokens)
                .bind(run.session_id.as_str())
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(Some((run, reply)))
        })
    }

    /// One recorded call by id.
    pub async fn tool_call(&self, call_id: &ToolCallId) -> Result<RecordedCall> {
        with_pool!(self, |pool| {
            let row = sqlx::query("SELECT * FROM tool_calls WHERE id = $1")
                .bind(call_id.as_str())
                .fetch_optional(pool)
                .await?
                .ok_or_else(|| StoreError::not_found("tool call", call_id))?;
            Ok(recorded(&row))
        })
    }

    /// Records a decision on call `call_id` of run `run_id`, once (call under the session's
    /// lock; [`Store::resume_decided`] then resumes the run when this was its last question):
    /// an "always" decision is remembered on the session in the same transaction.
    pub async fn decide(
        &self,
        run_id: &RunId,
        call_id: &ToolCallId,
        d: &NewDecision<'_>,
    ) -> Result<std::result::Result<Decided, NotDecided>> {
        let now = now_ms();
        let (status, result) = if d.decision.allows() {
            (ToolCallStatus::AwaitingApproval, None)
        } else {
            (ToolCallStatus::Denied, Some(d.declined.as_str()))
        };
        with_writer!(self, |pool| {
            let mut tx = pool.begin().await?;
            let decided = sqlx::query(DECIDE)
                .bind(d.decision.as_str())
                .bind(d.reason.map(|r| self.storable(r).into_owned()))
                .bind(now)
                .bind(d.by.map(|b| b.as_str()))
                .bind(d.from)
                .bind(status.as_str())
                .bind(result)
                .bind(call_id.as_str())
                .bind(run_id.as_str())
                .fetch_optional(&mut *tx)
                .await?;
            let Some(row) = decided else {
                tx.rollback().await?;
                let call = self.tool_call(call_id).await?;
                return Ok(Err(
                    if call
                        .call
                        .approval
                        .as_ref()
                        .is_some_and(|a| a.decision.is_some())
                    {
                        NotDecided::Decided(Box::new(call))
                    } else {
                        NotDecided::NotWaiting(Box::new(call))
                    },
                ));
            };
            let call = recorded(&row);
            let session_id = SessionId::new(row.text("session_id"));
            let grant = match d.decision {
                Decision::AllowAlways => Some(GrantDecision::Allow),
                Decision::RejectAlways => Some(GrantDecision::Reject),
                _ => None,
            };
            if let Some(decision) = grant {
                let stored: String = sqlx::query("SELECT tool_grants FROM sessions WHERE id = $1")
                    .bind(session_id.as_str())
                    .fetch_one(&mut *tx)
                    .await?
                    .try_get("tool_grants")?;
                let mut grants: Vec<ToolGrant> = serde_json::from_str(&stored).unwrap_or_default();
                grants.retain(|g| !(g.server == call.call.server && g.tool == call.call.tool));
                grants.push(ToolGrant {
                    server: call.call.server.clone(),
                    tool: call.call.tool.clone(),
                    decision,
                });
                sqlx::query("UPDATE sessions SET tool_grants = $1 WHERE id = $2")
                    .bind(serde_json::to_string(&grants).unwrap_or_else(|_| "[]".into()))
                    .bind(session_id.as_str())
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            Ok(Ok(Decided { call, session_id }))
        })
    }

    /// Resumes run `run_id` for `owner` when none of its calls waits undecided: `running`
    /// again, executed by `owner`. Once: a compare-and-set on the run's status, so of two
    /// instances (or a decision and the approvals loop) one resumes it.
    pub async fn resume_decided(&self, run_id: &RunId, owner: &str) -> Result<Option<Started>> {
        with_writer!(self, |pool| {
            let mut tx = pool.begin().await?;
            let Some(run_row) = sqlx::query(RESUME_RUN)
                .bind(run_id.as_str())
                .bind(now_ms())
                .bind(owner)
                .fetch_optional(&mut *tx)
                .await?
            else {
                tx.rollback().await?;
                return Ok(None);
            };
            let reply = sqlx::query(
                "SELECT *, EXISTS (SELECT 1 FROM supersessions x WHERE x.message_id = messages.id) AS superseded
                 FROM messages WHERE id = $1",
            )
            .bind(run_row.text("reply_message_id"))
            .fetch_optional(&mut *tx)
            .await?
            .ok_or_else(|| StoreError::not_found("reply of run", run_id))?;
            let started = Started {
                run: rows::run(&run_row),
                reply: rows::message(&reply),
                call: rows::session_call(&run_row),
                resumed: Some(run_row.int("active_ms")),
            };
            tx.commit().await?;
            Ok(Some(started))
        })
    }

    /// Runs `awaiting_approval` with no call waiting undecided: decided, but not resumed.
    pub async fn decided_runs(&self) -> Result<Vec<(SessionId, RunId)>> {
        with_pool!(self, |pool| {
            let rows: Vec<(String, String)> = sqlx::query_as(
                "SELECT r.session_id, r.id FROM runs r WHERE r.status = 'awaiting_approval'
                   AND NOT EXISTS (SELECT 1 FROM tool_calls c WHERE c.run_id = r.id
                                   AND c.status = 'awaiting_approval' AND c.decision IS NULL)",
            )
            .fetch_all(pool)
            .await?;
            Ok(rows
                .into_iter()
                .map(|(s, r)| (SessionId::new(s), RunId::new(r)))
                .collect())
        })
    }

    /// A call of a resumed run about to be sent: `running` from now, counted as executed.
    /// Fenced as a call's start is; `conflict` when it is not a queued or allowed call.
    pub async fn decided_call_sent(&self, run_id: &RunId, call_id: &ToolCallId) -> Result<i64> {
        let fenced = self.is_shared().then(super::shared::fence_sql);
        let now = now_ms();
        with_durable_writer!(self, |pool| {
            let mut tx = pool.begin().await?;
            if let Some(sql) = &fenced {
                let held: Option<i64> = sqlx::query_scalar(sql)
                    .bind(run_id.as_str())
                    .fetch_optional(&mut *tx)
                    .await?;
                if held.is_none() {
                    crate::metrics::metrics().fenced_write();
                    return Err(StoreError::conflict(
                        "this instance no longer holds the lease on this run",
                    ));
                }
            }
            let n = sqlx::query(CALL_SENT)
                .bind(now)
                .bind(call_id.as_str())
                .execute(&mut *tx)
                .await?
                .rows_affected();
            if n == 0 {
                return Err(StoreError::conflict(
                    "this tool call is not one to send: it was not allowed, or it ran",
                ));
            }
            sqlx::query("UPDATE runs SET tools_executed = tools_executed + 1 WHERE id = $1")
                .bind(run_id.as_str())
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(now)
        })
    }

    /// Every call waiting for a decision, oldest first (at most `limit`); with `asked_before`,
    /// only those asked before then (the timeout's sweep); with `after`, only those after that
    /// call in this order (the next page).
    pub async fn waiting_calls(
        &self,
        asked_before: Option<i64>,
        after: Option<&ToolCallId>,
        limit: i64,
    ) -> Result<Vec<WaitingCall>> {
        with_pool!(self, |pool| {
            let rows = sqlx::query(
                "SELECT * FROM tool_calls
                 WHERE status = 'awaiting_approval' AND decision IS NULL
                   AND (CAST($1 AS BIGINT) IS NULL OR asked_at < $1)
                   AND (CAST($3 AS TEXT) IS NULL OR (asked_at, id) >
                        ((SELECT asked_at FROM tool_calls WHERE id = $3), $3))
                 ORDER BY asked_at, id LIMIT $2",
            )
            .bind(asked_before)
            .bind(limit)
            .bind(after.map(ToolCallId::as_str))
            .fetch_all(pool)
            .await?;
            Ok(rows
                .iter()
                .map(|row| {
                    let c = recorded(row);
                    WaitingCall {
                        session_id: row.id("session_id"),
                        run_id: row.id("run_id"),
                        waiting_since: c.call.approval.as_ref().map_or(0, |a| a.asked_at),
                        call: c.call,
                    }
                })
                .collect())
        })
    }
}
