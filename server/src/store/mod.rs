//! The store: every read and write of Mulligan's state goes through [`Store`]. Today it is
//! SQLite through sqlx; a PostgreSQL backend goes beside it without changing callers.
mod rows;

use crate::clock::{new_id, now_ms};
use crate::error::{Error, Result};
use app::wire::{
    Attempt, AutoRetry, Message, MessageStatus, Provenance, RetryClassification, Run, RunKind,
    RunStatus, Session, SessionStatus,
};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteRow};
use sqlx::{Row, SqlitePool};
use std::str::FromStr;

pub use rows::{run_kind_str, run_status_str};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/sqlite");

#[derive(Clone)]
pub struct Store {
    pool: SqlitePool,
}

/// A session row as the server sees it (the wire `Session` plus what never leaves it).
pub struct SessionRecord {
    pub session: Session,
    pub agent_token_hash: String,
    pub tokens_used: i64,
}

/// One event as logged: its id, session and pre-rendered name and JSON data.
#[derive(Clone, Debug)]
pub struct LoggedEvent {
    pub id: i64,
    pub session_id: String,
    pub name: &'static str,
    pub data: String,
}

/// A run to queue: on a new operator message (a prompt, a continuation) or on an existing one.
pub struct NewRun<'a> {
    pub session_id: &'a str,
    /// The content of a new operator message to anchor on.
    pub new_message: Option<&'a str>,
    pub message_provenance: Option<Provenance>,
    /// The existing anchor, when there is no new message.
    pub anchor_id: Option<&'a str>,
    pub kind: RunKind,
    pub attempt: u32,
    pub provenance: Option<Provenance>,
    /// Supersede every visible message after the anchor (queued and held prompts excepted).
    pub supersede_after_anchor: bool,
}

/// How a run ended.
pub struct Outcome {
    pub status: RunStatus,
    pub content: String,
    pub error_message: Option<String>,
    pub retry: Option<RetryClassification>,
    pub tokens_used: i64,
}

const SESSION_COLUMNS: &str = "s.*,
    EXISTS (SELECT 1 FROM runs a WHERE a.session_id = s.id
            AND a.status IN ('queued','running') AND a.held_by IS NULL) AS busy,
    (SELECT r.id FROM runs r WHERE r.session_id = s.id ORDER BY r.seq DESC LIMIT 1) AS last_run_id";

const MESSAGE_COLUMNS: &str = "m.*,
    EXISTS (SELECT 1 FROM supersessions x WHERE x.message_id = m.id) AS superseded";

impl Store {
    /// Opens (creating if needed) the database and runs the migrations.
    pub async fn open(url: &str) -> Result<Store> {
        if !url.starts_with("sqlite:") {
            return Err(Error::invalid(format!(
                "unsupported database URL {:?}: use sqlite://path",
                url.split('@').next_back().unwrap_or("")
            )));
        }
        let opts = SqliteConnectOptions::from_str(url)
            .map_err(|e| Error::invalid(format!("bad database URL: {e}")))?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .foreign_keys(true)
            .busy_timeout(std::time::Duration::from_secs(10))
            .synchronous(sqlx::sqlite::SqliteSynchronous::Normal);
        let pool = SqlitePoolOptions::new()
            .max_connections(8)
            .connect_with(opts)
            .await?;
        MIGRATOR.run(&pool).await?;
        Ok(Store { pool })
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }

    // ---- sessions ----

    pub async fn create_session(
        &self,
        title: &str,
        model: &str,
        parent_id: Option<&str>,
        agent_token_hash: &str,
    ) -> Result<Session> {
        let id = new_id("s");
        sqlx::query(
            "INSERT INTO sessions (id, title, model, parent_id, agent_token_hash, created_at)
             VALUES (?, ?, ?, ?, ?, ?)",
        )
        .bind(&id)
        .bind(title)
        .bind(model)
        .bind(parent_id)
        .bind(agent_token_hash)
        .bind(now_ms())
        .execute(&self.pool)
        .await?;
        Ok(self.session(&id).await?.session)
    }

    pub async fn session(&self, id: &str) -> Result<SessionRecord> {
        let row = sqlx::query(&format!(
            "SELECT {SESSION_COLUMNS} FROM sessions s WHERE s.id = ?"
        ))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?
        .ok_or_else(|| Error::not_found("session", id))?;
        self.session_from_row(&row).await
    }

    pub async fn sessions(&self) -> Result<Vec<Session>> {
        let rows = sqlx::query(&format!(
            "SELECT {SESSION_COLUMNS} FROM sessions s ORDER BY s.created_at DESC, s.id DESC"
        ))
        .fetch_all(&self.pool)
        .await?;
        let mut out = Vec::with_capacity(rows.len());
        for row in &rows {
            out.push(self.session_from_row(row).await?.session);
        }
        Ok(out)
    }

    /// Every session's `(id, parent_id, agent_token_hash)`, in one light query: what MCP's
    /// caller authority needs (who holds this token, which sessions descend from it).
    pub async fn session_tree(&self) -> Result<Vec<(String, Option<String>, String)>> {
        Ok(
            sqlx::query_as("SELECT id, parent_id, agent_token_hash FROM sessions")
                .fetch_all(&self.pool)
                .await?,
        )
    }

    pub async fn update_session(
        &self,
        id: &str,
        title: Option<&str>,
        auto_retry: Option<AutoRetry>,
    ) -> Result<Session> {
        sqlx::query(
            "UPDATE sessions SET title = COALESCE(?, title), auto_retry = COALESCE(?, auto_retry)
             WHERE id = ?",
        )
        .bind(title)
        .bind(auto_retry.map(|a| a.as_str()))
        .bind(id)
        .execute(&self.pool)
        .await?;
        Ok(self.session(id).await?.session)
    }

    async fn session_from_row(&self, row: &SqliteRow) -> Result<SessionRecord> {
        let last_run_id: Option<String> = row.get("last_run_id");
        let last_run = match last_run_id {
            Some(id) => Some(self.run(&id).await?.summary()),
            None => None,
        };
        let busy: bool = row.get("busy");
        Ok(SessionRecord {
            session: Session {
                id: row.get("id"),
                title: row.get("title"),
                model: row.get("model"),
                parent_id: row.get("parent_id"),
                status: if busy {
                    SessionStatus::Running
                } else {
                    SessionStatus::Idle
                },
                created_at: row.get("created_at"),
                last_run,
                auto_retry: AutoRetry::parse(row.get("auto_retry")).unwrap_or_default(),
                waiting_retry: None,
            },
            agent_token_hash: row.get("agent_token_hash"),
            tokens_used: row.get("tokens_used"),
        })
    }

    // ---- messages and runs ----

    pub async fn messages(
        &self,
        session_id: &str,
        include_superseded: bool,
    ) -> Result<Vec<Message>> {
        let rows = sqlx::query(&format!(
            "SELECT {MESSAGE_COLUMNS} FROM messages m WHERE m.session_id = ? ORDER BY m.seq"
        ))
        .bind(session_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .iter()
            .map(rows::message)
            .filter(|m| include_superseded || !m.superseded)
            .collect())
    }

    pub async fn message(&self, id: &str) -> Result<Message> {
        let row = sqlx::query(&format!(
            "SELECT {MESSAGE_COLUMNS} FROM messages m WHERE m.id = ?"
        ))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?
        .ok_or_else(|| Error::not_found("message", id))?;
        Ok(rows::message(&row))
    }

    pub async fn runs(&self, session_id: &str) -> Result<Vec<Run>> {
        let rows = sqlx::query("SELECT * FROM runs WHERE session_id = ? ORDER BY seq")
            .bind(session_id)
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.iter().map(rows::run).collect())
    }

    pub async fn run(&self, id: &str) -> Result<Run> {
        let row = sqlx::query("SELECT * FROM runs WHERE id = ?")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?
            .ok_or_else(|| Error::not_found("run", id))?;
        Ok(rows::run(&row))
    }

    pub async fn attempts(&self, run_id: &str) -> Result<Vec<Attempt>> {
        let rows = sqlx::query("SELECT * FROM run_attempts WHERE run_id = ? ORDER BY n")
            .bind(run_id)
            .fetch_all(&self.pool)
            .await?;
        Ok(rows
            .iter()
            .map(|r| Attempt {
                n: r.get::<i64, _>("n") as u32,
                started_at: r.get("started_at"),
                error: r.get("error"),
                retry_in_ms: r.get("retry_in_ms"),
            })
            .collect())
    }

    /// Records that a run's conversation was compacted after a context overflow.
    pub async fn mark_compacted(&self, run_id: &str) -> Result<()> {
        sqlx::query("UPDATE runs SET compacted = 1 WHERE id = ?")
            .bind(run_id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Tier 1 attempt `n` of a run starts.
    pub async fn attempt_started(&self, run_id: &str, n: u32) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("INSERT OR REPLACE INTO run_attempts (run_id, n, started_at) VALUES (?, ?, ?)")
            .bind(run_id)
            .bind(n as i64)
            .bind(now_ms())
            .execute(&mut *tx)
            .await?;
        sqlx::query("UPDATE runs SET tier1_attempts = ? WHERE id = ?")
            .bind(n as i64)
            .bind(run_id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Tier 1 attempt `n` of a run failed; `retry_in_ms` when another follows after that wait.
    pub async fn attempt_failed(
        &self,
        run_id: &str,
        n: u32,
        error: &str,
        retry_in_ms: Option<i64>,
    ) -> Result<()> {
        sqlx::query(
            "UPDATE run_attempts SET error = ?, retry_in_ms = ? WHERE run_id = ? AND n = ?",
        )
        .bind(error)
        .bind(retry_in_ms)
        .bind(run_id)
        .bind(n as i64)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// In one transaction: an optional new operator message, the supersession of what follows
    /// the anchor (queued and held prompts excepted) and a queued run. Answers the new
    /// message, the run and the superseded message ids.
    pub async fn dispatch(&self, d: NewRun<'_>) -> Result<(Option<Message>, Run, Vec<String>)> {
        let mut tx = self.pool.begin().await?;
        let now = now_ms();
        let anchor_id = match &d.new_message {
            Some(content) => {
                let id = new_id("m");
                sqlx::query(
                    "INSERT INTO messages (id, session_id, seq, role, content, created_at, provenance)
                     VALUES (?, ?, (SELECT COALESCE(MAX(seq), 0) + 1 FROM messages WHERE session_id = ?),
                             'operator', ?, ?, ?)",
                )
                .bind(&id)
                .bind(d.session_id)
                .bind(d.session_id)
                .bind(content)
                .bind(now)
                .bind(rows::provenance_json(&d.message_provenance))
                .execute(&mut *tx)
                .await?;
                id
            }
            None => d
                .anchor_id
                .ok_or_else(|| Error::internal("a dispatch needs an anchor"))?
                .to_string(),
        };
        let run_id = insert_run(
            &mut tx,
            d.session_id,
            &anchor_id,
            d.kind,
            d.attempt,
            &d.provenance,
        )
        .await?;
        let superseded: Vec<String> = if d.supersede_after_anchor {
            sqlx::query_scalar(
                "INSERT INTO supersessions (message_id, by_run_id, at)
                 SELECT m.id, ?, ? FROM messages m
                 WHERE m.session_id = ? AND m.seq > (SELECT seq FROM messages WHERE id = ?)
                   AND NOT EXISTS (SELECT 1 FROM supersessions x WHERE x.message_id = m.id)
                   AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.anchor_message_id = m.id AND r.status = 'queued')
                 RETURNING message_id",
            )
            .bind(&run_id)
            .bind(now)
            .bind(d.session_id)
            .bind(&anchor_id)
            .fetch_all(&mut *tx)
            .await?
        } else {
            Vec::new()
        };
        tx.commit().await?;
        let message = match d.new_message {
            Some(_) => Some(self.message(&anchor_id).await?),
            None => None,
        };
        Ok((message, self.run(&run_id).await?, superseded))
    }

    /// The latest run anchored on a message.
    pub async fn latest_run_for(&self, anchor_message_id: &str) -> Result<Option<Run>> {
        let row =
            sqlx::query("SELECT * FROM runs WHERE anchor_message_id = ? ORDER BY seq DESC LIMIT 1")
                .bind(anchor_message_id)
                .fetch_optional(&self.pool)
                .await?;
        Ok(row.as_ref().map(rows::run))
    }

    /// How many runs a prompt has had: on itself, and as the origin of automatic resumes.
    pub async fn tries_of(&self, prompt_id: &str) -> Result<u32> {
        let n: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM runs WHERE anchor_message_id = ?
                OR json_extract(provenance, '$.prompt_id') = ?",
        )
        .bind(prompt_id)
        .bind(prompt_id)
        .fetch_one(&self.pool)
        .await?;
        Ok(n as u32)
    }

    /// How many automatic resumes (manual retries included) a prompt has had.
    pub async fn resumes_of(&self, prompt_id: &str) -> Result<u32> {
        let n: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM runs WHERE json_extract(provenance, '$.kind') = 'auto_resume'
                AND json_extract(provenance, '$.prompt_id') = ?",
        )
        .bind(prompt_id)
        .fetch_one(&self.pool)
        .await?;
        Ok(n as u32)
    }

    /// The session's last turn: its latest run not held behind a failure.
    pub async fn last_turn(&self, session_id: &str) -> Result<Option<Run>> {
        let row = sqlx::query(
            "SELECT * FROM runs WHERE session_id = ? AND held_by IS NULL ORDER BY seq DESC LIMIT 1",
        )
        .bind(session_id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.as_ref().map(rows::run))
    }

    /// Whether the session has a run running or queued (held prompts excepted).
    pub async fn has_active_run(&self, session_id: &str) -> Result<bool> {
        Ok(sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM runs WHERE session_id = ?
                AND (status = 'running' OR (status = 'queued' AND held_by IS NULL)))",
        )
        .bind(session_id)
        .fetch_one(&self.pool)
        .await?)
    }

    pub async fn has_running_run(&self, session_id: &str) -> Result<bool> {
        Ok(sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM runs WHERE session_id = ? AND status = 'running')",
        )
        .bind(session_id)
        .fetch_one(&self.pool)
        .await?)
    }

    /// The session's next run to start: the oldest queued run that is not held.
    pub async fn next_queued_run(&self, session_id: &str) -> Result<Option<Run>> {
        let row = sqlx::query(
            "SELECT * FROM runs WHERE session_id = ? AND status = 'queued' AND held_by IS NULL
             ORDER BY seq LIMIT 1",
        )
        .bind(session_id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.as_ref().map(rows::run))
    }

    /// In one transaction: the run becomes `running` and gets an empty streaming reply.
    pub async fn start_run(&self, run_id: &str) -> Result<(Run, Message)> {
        let run = self.run(run_id).await?;
        let mut tx = self.pool.begin().await?;
        let now = now_ms();
        let reply_id = new_id("m");
        sqlx::query(
            "INSERT INTO messages (id, session_id, seq, role, content, created_at, run_id, status, provenance)
             VALUES (?, ?, (SELECT COALESCE(MAX(seq), 0) + 1 FROM messages WHERE session_id = ?),
                     'agent', '', ?, ?, 'streaming', (SELECT provenance FROM runs WHERE id = ?))",
        )
        .bind(&reply_id)
        .bind(&run.session_id)
        .bind(&run.session_id)
        .bind(now)
        .bind(run_id)
        .bind(run_id)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "UPDATE runs SET status = 'running', started_at = ?, reply_message_id = ? WHERE id = ?",
        )
        .bind(now)
        .bind(&reply_id)
        .bind(run_id)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok((self.run(run_id).await?, self.message(&reply_id).await?))
    }

    /// Stores the reply text streamed so far (called on a timer, never per delta).
    pub async fn save_reply_text(&self, message_id: &str, content: &str) -> Result<()> {
        sqlx::query("UPDATE messages SET content = ? WHERE id = ? AND role = 'agent'")
            .bind(content)
            .bind(message_id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// In one transaction: the run's end, its reply's final text and status, the session's
    /// spend. A run that already ended is left alone (returns `None`).
    pub async fn finish_run(
        &self,
        run_id: &str,
        o: &Outcome,
    ) -> Result<Option<(Run, Option<Message>)>> {
        let mut tx = self.pool.begin().await?;
        let now = now_ms();
        let (retryable, class, until) = retry_columns(&o.retry);
        let done = sqlx::query(
            "UPDATE runs SET status = ?, error_message = ?, retryable = ?, retry_class = ?,
                 retry_after_until = ?, finished_at = ?, tokens_used = tokens_used + ?
             WHERE id = ? AND status IN ('queued', 'running')",
        )
        .bind(run_status_str(o.status))
        .bind(&o.error_message)
        .bind(retryable)
        .bind(class)
        .bind(until)
        .bind(now)
        .bind(o.tokens_used)
        .bind(run_id)
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() == 0 {
            return Ok(None);
        }
        let msg_status = match o.status {
            RunStatus::Completed => MessageStatus::Complete,
            RunStatus::Cancelled => MessageStatus::Cancelled,
            _ => MessageStatus::Failed,
        };
        sqlx::query(
            "UPDATE messages SET content = ?, status = ?, error_message = ?, retryable = ?,
                 retry_class = ?, retry_after_until = ?
             WHERE id = (SELECT reply_message_id FROM runs WHERE id = ?)",
        )
        .bind(&o.content)
        .bind(rows::message_status_str(msg_status))
        .bind(&o.error_message)
        .bind(retryable)
        .bind(class)
        .bind(until)
        .bind(run_id)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "UPDATE sessions SET tokens_used = tokens_used + ?
             WHERE id = (SELECT session_id FROM runs WHERE id = ?)",
        )
        .bind(o.tokens_used)
        .bind(run_id)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        let run = self.run(run_id).await?;
        let reply = match &run.reply_message_id {
            Some(id) => Some(self.message(id).await?),
            None => None,
        };
        Ok(Some((run, reply)))
    }

    /// Holds the prompts queued behind a failed run, so a retry of that turn runs first.
    pub async fn hold_queued(&self, session_id: &str, failed_run_id: &str) -> Result<Vec<Run>> {
        sqlx::query(
            "UPDATE runs SET held_by = ? WHERE session_id = ? AND status = 'queued' AND held_by IS NULL",
        )
        .bind(failed_run_id)
        .bind(session_id)
        .execute(&self.pool)
        .await?;
        self.held_runs(session_id).await
    }

    /// Lets every held prompt of the session go on; answers the released runs.
    pub async fn release_held(&self, session_id: &str) -> Result<Vec<Run>> {
        let held = self.held_runs(session_id).await?;
        sqlx::query("UPDATE runs SET held_by = NULL WHERE session_id = ? AND held_by IS NOT NULL AND status = 'queued'")
            .bind(session_id)
            .execute(&self.pool)
            .await?;
        let mut out = Vec::with_capacity(held.len());
        for r in held {
            out.push(self.run(&r.id).await?);
        }
        Ok(out)
    }

    async fn held_runs(&self, session_id: &str) -> Result<Vec<Run>> {
        let rows = sqlx::query(
            "SELECT * FROM runs WHERE session_id = ? AND status = 'queued' AND held_by IS NOT NULL ORDER BY seq",
        )
        .bind(session_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(rows::run).collect())
    }

    /// The conversation a run sends: every visible message up to and including its anchor,
    /// as `(role, content)`; operator prompts that have not run yet and empty or still
    /// streaming replies are left out.
    pub async fn history(&self, anchor_message_id: &str) -> Result<Vec<(app::wire::Role, String)>> {
        let anchor = self.message(anchor_message_id).await?;
        let msgs = self.messages(&anchor.session_id, false).await?;
        let not_yet_run: std::collections::HashSet<String> = sqlx::query_scalar(
            "SELECT anchor_message_id FROM runs WHERE session_id = ?
             GROUP BY anchor_message_id HAVING MAX(started_at) IS NULL",
        )
        .bind(&anchor.session_id)
        .fetch_all(&self.pool)
        .await?
        .into_iter()
        .collect();
        let anchor_pos = msgs.iter().position(|m| m.id == anchor.id);
        Ok(msgs
            .into_iter()
            .take(anchor_pos.map_or(usize::MAX, |p| p + 1))
            .filter(|m| match m.role {
                app::wire::Role::Operator => m.id == anchor.id || !not_yet_run.contains(&m.id),
                app::wire::Role::Agent => {
                    m.status != Some(MessageStatus::Streaming) && !m.content.is_empty()
                }
            })
            .map(|m| (m.role, m.content))
            .collect())
    }

    /// Runs that were `running` when the server stopped: their ids and session ids.
    pub async fn runs_left_running(&self) -> Result<Vec<Run>> {
        let rows = sqlx::query("SELECT * FROM runs WHERE status = 'running' ORDER BY seq")
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.iter().map(rows::run).collect())
    }

    /// Sessions with a queued run that is free to start.
    pub async fn sessions_with_queued_runs(&self) -> Result<Vec<String>> {
        let rows = sqlx::query(
            "SELECT DISTINCT session_id FROM runs WHERE status = 'queued' AND held_by IS NULL",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(|r| r.get("session_id")).collect())
    }

    // ---- event log ----

    pub async fn max_event_id(&self) -> Result<i64> {
        Ok(
            sqlx::query_scalar("SELECT COALESCE(MAX(id), 0) FROM events")
                .fetch_one(&self.pool)
                .await?,
        )
    }

    /// Appends a batch of events in one transaction.
    pub async fn append_events(&self, batch: &[&LoggedEvent]) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        for chunk in batch.chunks(200) {
            let mut qb =
                sqlx::QueryBuilder::new("INSERT INTO events (id, session_id, name, data) ");
            qb.push_values(chunk, |mut b, e| {
                b.push_bind(e.id)
                    .push_bind(&e.session_id)
                    .push_bind(e.name)
                    .push_bind(&e.data);
            });
            qb.build().execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// The session's logged events with `after < id < before`, in order.
    pub async fn events_between(
        &self,
        session_id: &str,
        after: i64,
        before: i64,
    ) -> Result<Vec<LoggedEvent>> {
        let rows = sqlx::query(
            "SELECT id, name, data FROM events WHERE session_id = ? AND id > ? AND id < ? ORDER BY id",
        )
        .bind(session_id)
        .bind(after)
        .bind(before)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .iter()
            .filter_map(|r| {
                Some(LoggedEvent {
                    id: r.get("id"),
                    session_id: session_id.to_string(),
                    name: static_event_name(r.get("name"))?,
                    data: r.get("data"),
                })
            })
            .collect())
    }
}

/// Inserts a queued run with the session's next run sequence number; answers its id.
async fn insert_run(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    session_id: &str,
    anchor_message_id: &str,
    kind: RunKind,
    attempt: u32,
    provenance: &Option<Provenance>,
) -> Result<String> {
    let id = new_id("r");
    sqlx::query(
        "INSERT INTO runs (id, session_id, seq, anchor_message_id, status, kind, attempt, provenance, created_at)
         VALUES (?, ?, (SELECT COALESCE(MAX(seq), 0) + 1 FROM runs WHERE session_id = ?), ?, 'queued', ?, ?, ?, ?)",
    )
    .bind(&id)
    .bind(session_id)
    .bind(session_id)
    .bind(anchor_message_id)
    .bind(run_kind_str(kind))
    .bind(attempt as i64)
    .bind(rows::provenance_json(provenance))
    .bind(now_ms())
    .execute(&mut **tx)
    .await?;
    Ok(id)
}

fn retry_columns(r: &Option<RetryClassification>) -> (Option<bool>, Option<&str>, Option<i64>) {
    match r {
        Some(r) => (
            Some(r.retryable),
            Some(r.retry_class.as_str()),
            r.retry_after_until,
        ),
        None => (None, None, None),
    }
}

fn static_event_name(name: &str) -> Option<&'static str> {
    ["message", "delta", "run", "attempt", "session"]
        .into_iter()
        .find(|n| *n == name)
}
