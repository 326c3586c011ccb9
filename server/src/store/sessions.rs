//! Sessions: create, read, rename, tool sources, and the waiting background retry; the
//! paged list is in `session_pages`.
use super::*;
use app::wire::RunId;
use app::wire::SessionId;

/// A session row as the server sees it (the wire `Session` plus what never leaves it).
pub struct SessionRecord {
    pub session: Session,
    pub agent_token_hash: String,
    pub tokens_used: i64,
    /// The last background retry's number (kept after it fires).
    pub retry_attempt: u32,
    /// The failed run the waiting background retry is for (`None` when none waits).
    pub retry_run_id: Option<RunId>,
    /// The model its waiting retry is parked behind (CONTRACT §7), if any.
    pub parked_on: Option<String>,
}

/// Ends session $1's waiting background retry, if one waits (its attempt number stays).
pub(super) const END_WAITING_RETRY: &str =
    "UPDATE sessions SET retry_fires_at = NULL, retry_reason = NULL, retry_run_id = NULL
     WHERE id = $1 AND retry_fires_at IS NOT NULL
     RETURNING id";

/// A session row with its summary: busy or not, and its last run (joined: one query for
/// any number of sessions). Append `WHERE …`/`ORDER BY …`.
pub(super) fn session_select() -> String {
    format!(
        "SELECT s.*,
            EXISTS (SELECT 1 FROM runs a WHERE a.session_id = s.id
                    AND a.status IN ('queued','running','awaiting_approval') AND a.held_by IS NULL) AS busy,
            (EXISTS (SELECT 1 FROM runs w WHERE w.session_id = s.id
                     AND w.status = 'awaiting_approval')
             OR EXISTS (SELECT 1 FROM tool_calls q WHERE q.session_id = s.id
                        AND q.status = 'awaiting_approval' AND q.decision IS NULL)) AS awaiting,
            {}
         FROM sessions s
         LEFT JOIN runs lr ON lr.id =
            (SELECT r.id FROM runs r WHERE r.session_id = s.id ORDER BY r.seq DESC LIMIT 1)",
        rows::LAST_RUN_COLUMNS
    )
}

/// A session to create, as checked by the engine.
pub struct NewSession<'a> {
    pub title: &'a str,
    pub model: &'a str,
    pub parent_id: Option<&'a SessionId>,
    pub agent_token_hash: &'a str,
    pub auto_retry: AutoRetry,
    pub tools: &'a [String],
    /// Its own fallback chain (`None`: the catalogue's).
    pub fallbacks: Option<&'a [String]>,
    pub approval: ApprovalMode,
}

impl<'a> NewSession<'a> {
    /// A session titled "t" on `model`, without parent, tools or own fallbacks, Tier 2 off:
    /// what a test sets the rest of on.
    pub fn plain(model: &'a str, agent_token_hash: &'a str) -> Self {
        NewSession {
            title: "t",
            model,
            parent_id: None,
            agent_token_hash,
            auto_retry: AutoRetry::Off,
            tools: &[],
            fallbacks: None,
            approval: ApprovalMode::Policy,
        }
    }
}

/// A change of a session's settings: what is given changes.
#[derive(Clone, Debug, Default)]
pub struct SessionChange {
    pub title: Option<String>,
    pub auto_retry: Option<AutoRetry>,
    pub tools: Option<Vec<String>>,
    /// A new fallback chain (`Some(vec![])`: none at all).
    pub fallbacks: Option<Vec<String>>,
    pub approval: Option<ApprovalMode>,
    /// The grants that stay (the engine checks that only removals are asked).
    pub tool_grants: Option<Vec<ToolGrant>>,
}

/// What a run's provider request needs of its session, read as the run starts.
#[derive(Debug)]
pub struct SessionCall {
    pub model: String,
    /// Tokens the session has spent so far.
    pub tokens_used: i64,
    /// The tool sources its turns may use.
    pub tools: Vec<String>,
    /// Its own fallback chain (`None`: the catalogue's).
    pub fallbacks: Option<Vec<String>>,
    /// Which of its calls ask (CONTRACT §8), and what it remembers.
    pub approval: ApprovalMode,
    pub tool_grants: Vec<ToolGrant>,
}

/// A row of [`session_select`] as the server sees it.
pub(super) fn session_from_row<R: Get>(row: &R) -> SessionRecord {
    let last_run = row
        .opt_text("lr_id")
        .map(|_| rows::run(&rows::Prefixed(row, "lr_")).summary());
    SessionRecord {
        session: Session {
            id: row.id("id"),
            title: row.text("title"),
            model: row.text("model"),
            parent_id: row.opt_id("parent_id"),
            status: if row.flag("awaiting") {
                SessionStatus::AwaitingApproval
            } else if row.flag("busy") {
                SessionStatus::Running
            } else {
                SessionStatus::Idle
            },
            created_at: row.int("created_at"),
            last_run,
            auto_retry: rows::word(row, "auto_retry", AutoRetry::default()),
            waiting_retry: row.opt_int("retry_fires_at").map(|fires_at| WaitingRetry {
                attempt: row.int("retry_attempt") as u32,
                fires_at,
                reason: RetryClass::parse(&row.opt_text("retry_reason").unwrap_or_default()),
            }),
            tools: rows::tools(row),
            fallbacks: row
                .opt_text("fallbacks")
                .map(|_| rows::json_list(row, "fallbacks")),
            approval: rows::word(row, "approval", ApprovalMode::default()),
            tool_grants: rows::json_list(row, "tool_grants"),
        },
        agent_token_hash: row.text("agent_token_hash"),
        tokens_used: row.int("tokens_used"),
        retry_attempt: row.int("retry_attempt") as u32,
        retry_run_id: row.opt_id("retry_run_id"),
        parked_on: row.opt_text("parked_on"),
    }
}

impl Store {
    pub async fn create_session(&self, new: &NewSession<'_>) -> Result<Session> {
        let tools = serde_json::to_string(new.tools).unwrap_or_else(|_| "[]".into());
        let fallbacks = new.fallbacks.and_then(|f| serde_json::to_string(f).ok());
        with_writer!(self, |pool| {
            let id = SessionId::new(new_id("s"));
            sqlx::query(
            "INSERT INTO sessions (id, title, model, parent_id, agent_token_hash, created_at, auto_retry, tools, fallbacks, approval)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        )
        .bind(id.as_str())
        .bind(self.storable(new.title))
        .bind(new.model)
        .bind(new.parent_id.map(SessionId::as_str))
        .bind(new.agent_token_hash)
        .bind(now_ms())
        .bind(new.auto_retry.as_str())
        .bind(tools)
        .bind(fallbacks)
        .bind(new.approval.as_str())
        .execute(pool)
        .await?;
            Ok(self.session(&id).await?.session)
        })
    }

    pub async fn session(&self, id: &SessionId) -> Result<SessionRecord> {
        with_pool!(self, |pool| {
            let row = sqlx::query(&format!("{} WHERE s.id = $1", session_select()))
                .bind(id.as_str())
                .fetch_optional(pool)
                .await?
                .ok_or_else(|| StoreError::not_found("session", id))?;
            Ok(session_from_row(&row))
        })
    }

    /// `not_found` unless the session exists (one indexed lookup, no summary).
    pub async fn session_exists(&self, id: &SessionId) -> Result<()> {
        with_pool!(self, |pool| {
            sqlx::query("SELECT 1 FROM sessions WHERE id = $1")
                .bind(id.as_str())
                .fetch_optional(pool)
                .await?
                .map(|_| ())
                .ok_or_else(|| StoreError::not_found("session", id))
        })
    }

    /// The session's approval mode and remembered decisions as they are now (CONTRACT §8:
    /// read for each step's calls, so a change applies within a running turn).
    pub async fn approval_settings(
        &self,
        id: &SessionId,
    ) -> Result<(ApprovalMode, Vec<ToolGrant>)> {
        with_pool!(self, |pool| {
            let row = sqlx::query("SELECT approval, tool_grants FROM sessions WHERE id = $1")
                .bind(id.as_str())
                .fetch_optional(pool)
                .await?
                .ok_or_else(|| StoreError::not_found("session", id))?;
            Ok((
                rows::word(&row, "approval", ApprovalMode::default()),
                rows::json_list(&row, "tool_grants"),
            ))
        })
    }

    /// The session whose agent token has this hash (an indexed lookup).
    pub async fn session_by_token_hash(&self, hash: &str) -> Result<Option<(SessionId, String)>> {
        with_pool!(self, |pool| {
            Ok(sqlx::query_as(
                "SELECT id, agent_token_hash FROM sessions WHERE agent_token_hash = $1",
            )
            .bind(hash)
            .fetch_optional(pool)
            .await?
            .map(|(id, hash): (String, String)| (SessionId::new(id), hash)))
        })
    }

    /// Every session's `(id, parent_id, agent_token_hash)`, in one light query: what MCP's
    /// caller authority needs (which sessions descend from a token's session).
    /// Whether `id` descends from `ancestor` (a child, grandchild, …; never itself): walks up
    /// from `id` by the primary key, so the cost follows the depth, not the server's sessions.
    /// `UNION` ends the walk even on a cycle of parent links.
    pub async fn is_descendant(&self, ancestor: &SessionId, id: &SessionId) -> Result<bool> {
        with_pool!(self, |pool| {
            let found: Option<i64> = sqlx::query_scalar(
                "WITH RECURSIVE up(id, parent_id) AS (
                 SELECT id, parent_id FROM sessions WHERE id = $1
                 UNION SELECT s.id, s.parent_id FROM sessions s JOIN up ON s.id = up.parent_id)
             SELECT CAST(1 AS BIGINT) FROM up WHERE parent_id = $2 AND id <> $2 LIMIT 1",
            )
            .bind(id.as_str())
            .bind(ancestor.as_str())
            .fetch_optional(pool)
            .await?;
            Ok(found.is_some())
        })
    }

    pub async fn update_session(&self, id: &SessionId, change: &SessionChange) -> Result<Session> {
        let json = |list: &Vec<String>| serde_json::to_string(list).unwrap_or_else(|_| "[]".into());
        let tools = change.tools.as_ref().map(json);
        let fallbacks = change.fallbacks.as_ref().map(json);
        let grants = change
            .tool_grants
            .as_ref()
            .map(|g| serde_json::to_string(g).unwrap_or_else(|_| "[]".into()));
        with_writer!(self, |pool| {
            sqlx::query(
            "UPDATE sessions SET title = COALESCE($1, title), auto_retry = COALESCE($2, auto_retry),
                 tools = COALESCE($3, tools), fallbacks = COALESCE($5, fallbacks),
                 approval = COALESCE($6, approval), tool_grants = COALESCE($7, tool_grants)
             WHERE id = $4",
        )
        .bind(self.storable_opt(change.title.as_deref()))
        .bind(change.auto_retry.as_ref().map(|a| a.as_str()))
        .bind(tools)
        .bind(id.as_str())
        .bind(fallbacks)
        .bind(change.approval.map(|a| a.as_str()))
        .bind(grants)
        .execute(pool)
        .await?;
            Ok(self.session(id).await?.session)
        })
    }

    /// Sets the session's waiting background retry, for its failed run `run_id`.
    pub async fn set_waiting_retry(
        &self,
        session_id: &SessionId,
        run_id: &RunId,
        w: &WaitingRetry,
        parked_on: Option<&str>,
    ) -> Result<()> {
        with_writer!(self, |pool| {
            let done = sqlx::query(
                "UPDATE sessions SET retry_attempt = $1, retry_fires_at = $2, retry_reason = $3,
                     retry_run_id = $4, parked_on = $6
                 WHERE id = $5",
            )
            .bind(w.attempt as i64)
            .bind(w.fires_at)
            .bind(w.reason.as_str())
            .bind(run_id.as_str())
            .bind(session_id.as_str())
            .bind(parked_on)
            .execute(pool)
            .await?;
            if done.rows_affected() == 0 {
                return Err(StoreError::not_found("session", session_id));
            }
            Ok(())
        })
    }

    /// Ends the session's waiting background retry, if one waits (answers whether one did);
    /// its attempt number stays. One statement: no read-then-write race.
    pub async fn clear_waiting_retry(&self, session_id: &SessionId) -> Result<bool> {
        with_writer!(self, |pool| {
            let ended = sqlx::query(END_WAITING_RETRY)
                .bind(session_id.as_str())
                .fetch_optional(pool)
                .await?;
            Ok(ended.is_some())
        })
    }

    /// When the earliest waiting background retry fires, if one waits.
    pub async fn next_waiting_retry(&self) -> Result<Option<i64>> {
        with_pool!(self, |pool| {
            Ok(sqlx::query_scalar(
                "SELECT MIN(retry_fires_at) FROM sessions WHERE retry_fires_at IS NOT NULL",
            )
            .fetch_one(pool)
            .await?)
        })
    }

    /// Sessions whose waiting background retry is due at `now`, soonest first, with the
    /// model each is parked behind.
    pub async fn due_waiting_retries(&self, now: i64) -> Result<Vec<(SessionId, Option<String>)>> {
        with_pool!(self, |pool| {
            let ids: Vec<(String, Option<String>)> = sqlx::query_as(
                "SELECT id, parked_on FROM sessions
                 WHERE retry_fires_at IS NOT NULL AND retry_fires_at <= $1
                 ORDER BY retry_fires_at",
            )
            .bind(now)
            .fetch_all(pool)
            .await?;
            Ok(ids
                .into_iter()
                .map(|(id, parked)| (SessionId::new(id), parked))
                .collect())
        })
    }
}
