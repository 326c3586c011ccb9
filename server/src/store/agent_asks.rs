//! An ACP agent's permission request (CONTRACT §9) as a call awaiting approval: asked while
//! its run goes on running here (the question lives in the agent's process), decided as any
//! call is ([`Store::decide`]), and running again once allowed.
use super::{with_writer, Pool, Result, Store, StoreError};
use crate::clock::now_ms;
use app::wire::{ToolCall, ToolCallId};

/// The call ($2) starts waiting at $1, only while it runs, as the agent describes it now
/// (title $3, arguments $4): what the operator decides is what runs.
const ASK: &str = "UPDATE tool_calls SET status = 'awaiting_approval', asked_at = $1,
         tool = $3, arguments = $4
     WHERE id = $2 AND status = 'running'";
/// The call ($2) allowed runs from $1 (its time counts from its decision, as a model's
/// allowed call's does from its sending).
const ALLOWED: &str = "UPDATE tool_calls SET status = 'running', started_at = $1
     WHERE id = $2 AND status = 'awaiting_approval'
       AND decision IN ('allow_once', 'allow_always')";

impl Store {
    /// Records that the agent asks before running `call`: `awaiting_approval`, asked now,
    /// with the title and arguments it asks with. Answers when it was asked.
    pub async fn agent_call_asks(&self, call: &ToolCall) -> Result<i64> {
        let arguments = serde_json::to_string(&call.arguments).unwrap_or_else(|_| "null".into());
        self.agent_call_now(
            ASK,
            &call.id,
            &[call.tool.clone(), arguments],
            "this tool call no longer runs here: its run ended or its lease lapsed",
        )
        .await
    }

    /// Records that agent call `call`, allowed, runs from now. Answers since when.
    pub async fn agent_call_allowed(&self, call: &ToolCallId) -> Result<i64> {
        self.agent_call_now(
            ALLOWED,
            call,
            &[],
            "this tool call was not allowed, or its run no longer runs here",
        )
        .await
    }

    /// Runs `sql` ($1 now, $2 the call, then `more`) on the call while its run is `running`
    /// under a live lease (fencing, where instances share the database); `refused` when it
    /// changed nothing.
    async fn agent_call_now(
        &self,
        sql: &str,
        call: &ToolCallId,
        more: &[String],
        refused: &str,
    ) -> Result<i64> {
        let sql = if self.is_shared() {
            format!(
                "{sql} AND EXISTS (SELECT 1 FROM runs r
                     WHERE r.id = tool_calls.run_id AND r.status = 'running' AND {})",
                super::shared::lease_live("r")
            )
        } else {
            sql.to_string()
        };
        let now = now_ms();
        with_writer!(self, |pool| {
            let mut query = sqlx::query(&sql).bind(now).bind(call.as_str());
            for value in more {
                query = query.bind(value.as_str());
            }
            let n = query.execute(pool).await?.rows_affected();
            if n == 0 {
                return Err(StoreError::conflict(refused));
            }
            Ok(now)
        })
    }
}
