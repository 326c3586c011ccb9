//! Reads of runs: a session's runs and queue state, a prompt's tries, the held prompts, and
//! the runs left running by a stop or by another instance.
use super::*;
use app::wire::SessionId;
use app::wire::{MessageId, PromptId, RunId};

impl Store {
    pub async fn runs(&self, session_id: &SessionId) -> Result<Vec<Run>> {
        with_pool!(self, |pool| {
            let rows = sqlx::query("SELECT * FROM runs WHERE session_id = $1 ORDER BY seq")
                .bind(session_id.as_str())
                .fetch_all(pool)
                .await?;
            Ok(rows.iter().map(rows::run).collect())
        })
    }

    pub async fn run(&self, id: &RunId) -> Result<Run> {
        Ok(self.run_and_owner(id).await?.0)
    }

    /// A run and the instance that executes or executed it (none before it started).
    pub async fn run_and_owner(&self, id: &RunId) -> Result<(Run, Option<String>)> {
        with_pool!(self, |pool| {
            let row = sqlx::query("SELECT * FROM runs WHERE id = $1")
                .bind(id.as_str())
                .fetch_optional(pool)
                .await?
                .ok_or_else(|| StoreError::not_found("run", id))?;
            Ok((rows::run(&row), row.opt_text("owner")))
        })
    }

    /// The latest run anchored on a message.
    pub async fn latest_run_for(&self, anchor_message_id: &MessageId) -> Result<Option<Run>> {
        with_pool!(self, |pool| {
            let row = sqlx::query(
                "SELECT * FROM runs WHERE anchor_message_id = $1 ORDER BY seq DESC LIMIT 1",
            )
            .bind(anchor_message_id.as_str())
            .fetch_optional(pool)
            .await?;
            Ok(row.as_ref().map(rows::run))
        })
    }

    /// How many runs a prompt has had: on itself, and as the origin of automatic resumes.
    pub async fn tries_of(&self, prompt_id: &PromptId) -> Result<u32> {
        with_pool!(self, |pool| {
            let n: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM runs WHERE anchor_message_id = $1 OR prompt_id = $2",
            )
            .bind(prompt_id.as_str())
            .bind(prompt_id.as_str())
            .fetch_one(pool)
            .await?;
            Ok(u32::try_from(n).unwrap_or(u32::MAX))
        })
    }

    /// How many automatic resumes (manual retries included) a prompt has had.
    pub async fn resumes_of(&self, prompt_id: &PromptId) -> Result<u32> {
        with_pool!(self, |pool| {
            let n: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM runs WHERE prompt_id = $1 AND provenance_kind = 'auto_resume'",
        )
        .bind(prompt_id.as_str())
        .fetch_one(pool)
        .await?;
            Ok(u32::try_from(n).unwrap_or(u32::MAX))
        })
    }

    /// The session's last turn: its latest run not held behind a failure.
    pub async fn last_turn(&self, session_id: &SessionId) -> Result<Option<Run>> {
        with_pool!(self, |pool| {
            let row = sqlx::query(
            "SELECT * FROM runs WHERE session_id = $1 AND held_by IS NULL ORDER BY seq DESC LIMIT 1",
        )
        .bind(session_id.as_str())
        .fetch_optional(pool)
        .await?;
            Ok(row.as_ref().map(rows::run))
        })
    }

    /// Whether the session has a run running or queued (held prompts excepted).
    pub async fn has_active_run(&self, session_id: &SessionId) -> Result<bool> {
        with_pool!(self, |pool| {
            Ok(sqlx::query_scalar(
                "SELECT EXISTS (SELECT 1 FROM runs WHERE session_id = $1
                AND (status IN ('running', 'awaiting_approval') OR (status = 'queued' AND held_by IS NULL)))",
            )
            .bind(session_id.as_str())
            .fetch_one(pool)
            .await?)
        })
    }

    /// The session's prompts held behind a failed turn (`finish_run` holds them), in order.
    pub async fn held_runs(&self, session_id: &SessionId) -> Result<Vec<Run>> {
        with_pool!(self, |pool| {
            let rows = sqlx::query(
            "SELECT * FROM runs WHERE session_id = $1 AND status = 'queued' AND held_by IS NOT NULL ORDER BY seq",
        )
        .bind(session_id.as_str())
        .fetch_all(pool)
        .await?;
            Ok(rows.iter().map(rows::run).collect())
        })
    }

    /// Runs that were `running` when the server stopped: their ids and session ids.
    pub async fn runs_left_running(&self) -> Result<Vec<Run>> {
        with_pool!(self, |pool| {
            let rows = sqlx::query("SELECT * FROM runs WHERE status = 'running' ORDER BY seq")
                .fetch_all(pool)
                .await?;
            Ok(rows.iter().map(rows::run).collect())
        })
    }

    /// Runs recorded `running` with `owner` as the instance executing them.
    pub async fn running_runs_of(&self, owner: &str) -> Result<Vec<Run>> {
        with_pool!(self, |pool| {
            let rows = sqlx::query(
                "SELECT * FROM runs WHERE status = 'running' AND owner = $1 ORDER BY seq",
            )
            .bind(owner)
            .fetch_all(pool)
            .await?;
            Ok(rows.iter().map(rows::run).collect())
        })
    }

    /// Sessions with a queued run (not held) and none running: a run that should have
    /// started. One query on the runs by status.
    pub async fn sessions_waiting_to_start(&self) -> Result<Vec<SessionId>> {
        with_pool!(self, |pool| {
            let ids: Vec<String> = sqlx::query_scalar(
                "SELECT DISTINCT q.session_id FROM runs q
                 WHERE q.status = 'queued' AND q.held_by IS NULL
                   AND NOT EXISTS (SELECT 1 FROM runs r
                                   WHERE r.session_id = q.session_id
                                     AND r.status IN ('running', 'awaiting_approval'))",
            )
            .fetch_all(pool)
            .await?;
            Ok(ids.into_iter().map(SessionId::new).collect())
        })
    }

    /// Sessions with a queued run that is free to start.
    pub async fn sessions_with_queued_runs(&self) -> Result<Vec<SessionId>> {
        with_pool!(self, |pool| {
            let rows = sqlx::query(
                "SELECT DISTINCT session_id FROM runs WHERE status = 'queued' AND held_by IS NULL",
            )
            .fetch_all(pool)
            .await?;
            Ok(rows
                .iter()
                .map(|r| SessionId::new(r.get::<String, _>("session_id")))
                .collect())
        })
    }
}
