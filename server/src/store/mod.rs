//! The store: every read and write of Mulligan's state goes through [`Store`], on SQLite (the
//! embedded default) or PostgreSQL (several instances on one database). The SQL is written
//! once, in the dialect both accept (`$n` parameters, `ON CONFLICT`, `RETURNING`);
//! [`with_pool!`] runs a body against whichever pool is open.
mod cooldowns;
mod rows;
mod shared;
mod tool_calls;

use crate::clock::{new_id, now_ms};
use crate::error::{Error, Result};
use app::wire::{
    Attempt, AutoRetry, Message, MessageStatus, Provenance, RetryClassification, Run, RunKind,
    RunStatus, Session, SessionStatus, WaitingRetry,
};
use rows::Get;
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions};
use sqlx::Row;
use std::str::FromStr;

pub use rows::{run_kind_str, run_status_str};
pub use shared::{SessionLock, CANCEL_CHANNEL, EVENTS_CHANNEL};
pub use tool_calls::{parts, NewToolCall, RecordedCall};

static SQLITE_MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/sqlite");
static POSTGRES_MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/postgres");

#[derive(Clone)]
pub struct Store {
    pool: Pool,
    /// PostgreSQL only: the connections that must never wait behind the main pool.
    side: Option<std::sync::Arc<shared::SidePools>>,
}

/// The main pool's size on PostgreSQL unless the operator sets one
/// (`MULLIGAN_DATABASE_MAX_CONNECTIONS`).
pub const DEFAULT_MAX_CONNECTIONS: u32 = 32;

#[derive(Clone)]
enum Pool {
    /// Readers side by side (WAL), and every write through one connection: writers queue in
    /// order here instead of meeting `SQLITE_BUSY` and sleeping in SQLite's busy handler.
    Sqlite {
        read: SqlitePool,
        write: SqlitePool,
    },
    Postgres(PgPool),
}

/// Runs `$body` with `$pool` bound to the open pool, whichever backend it is (the body is
/// compiled once per backend, so rows and transactions keep their concrete types). For reads;
/// a body that writes uses [`with_writer!`].
macro_rules! with_pool {
    ($store:expr, $pool:ident => $body:expr) => {
        match &$store.pool {
            Pool::Sqlite { read: $pool, .. } => $body,
            Pool::Postgres($pool) => $body,
        }
    };
}
pub(crate) use with_pool;

/// [`with_pool!`] for a body that writes: SQLite's one writer connection.
macro_rules! with_writer {
    ($store:expr, $pool:ident => $body:expr) => {
        match &$store.pool {
            Pool::Sqlite { write: $pool, .. } => $body,
            Pool::Postgres($pool) => $body,
        }
    };
}
pub(crate) use with_writer;

/// One message of a run's conversation, as [`Store::history`] reads it.
#[derive(Clone, Debug, PartialEq)]
pub struct HistoryEntry {
    pub id: String,
    /// The message made tool calls (read them with `tool_calls_of_session`).
    pub has_calls: bool,
    pub role: app::wire::Role,
    pub content: String,
}

/// A session row as the server sees it (the wire `Session` plus what never leaves it).
pub struct SessionRecord {
    pub session: Session,
    pub agent_token_hash: String,
    pub tokens_used: i64,
    /// The last background retry's number (kept after it fires).
    pub retry_attempt: u32,
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

/// A session row with its summary: busy or not, and its last run (joined: one query for
/// any number of sessions). Append `WHERE …`/`ORDER BY …`.
fn session_select() -> String {
    format!(
        "SELECT s.*,
            EXISTS (SELECT 1 FROM runs a WHERE a.session_id = s.id
                    AND a.status IN ('queued','running') AND a.held_by IS NULL) AS busy,
            {}
         FROM sessions s
         LEFT JOIN runs lr ON lr.id =
            (SELECT r.id FROM runs r WHERE r.session_id = s.id ORDER BY r.seq DESC LIMIT 1)",
        rows::LAST_RUN_COLUMNS
    )
}

/// The largest page `GET /sessions?limit=` and MCP `list_sessions` give.
pub const MAX_SESSION_PAGE: u32 = 1000;

/// Which sessions to list, newest first: those older than `before` (a session id), at most
/// `limit` of them (`None`: all).
#[derive(Clone, Debug, Default)]
pub struct SessionPage {
    pub limit: Option<u32>,
    pub before: Option<String>,
}

impl SessionPage {
    /// A page as a client asked for it: `limit` from 1 to [`MAX_SESSION_PAGE`], `before` a
    /// session id (an empty one counts as none); `invalid` otherwise.
    pub fn new(limit: Option<u64>, before: Option<String>) -> Result<SessionPage> {
        let limit = match limit {
            None => None,
            Some(n) if (1..=u64::from(MAX_SESSION_PAGE)).contains(&n) => u32::try_from(n).ok(),
            Some(n) => {
                return Err(Error::invalid(format!(
                    "`limit` is {n}; use 1 to {MAX_SESSION_PAGE}"
                )))
            }
        };
        Ok(SessionPage {
            limit,
            before: before.filter(|b| !b.is_empty()),
        })
    }
}

/// What an INSERT into messages returns: the row as a snapshot reads it (a new message
/// is never superseded).
const NEW_MESSAGE: &str = "*, FALSE AS superseded";

const MESSAGE_COLUMNS: &str = "m.*,
    EXISTS (SELECT 1 FROM supersessions x WHERE x.message_id = m.id) AS superseded";

impl Store {
    /// Opens (creating if needed) the database and runs the migrations. PostgreSQL's
    /// migrator holds an advisory lock, so instances starting together do not race them.
    pub async fn open(url: &str) -> Result<Store> {
        Store::open_with(url, DEFAULT_MAX_CONNECTIONS).await
    }

    /// [`Store::open`] with the main PostgreSQL pool's size (ignored on SQLite). Session
    /// locks and heartbeats have their own connections besides (see [`shared::SidePools`]).
    pub async fn open_with(url: &str, max_connections: u32) -> Result<Store> {
        let max_connections = max_connections.max(2);
        let mut side = None;
        let pool = if url.starts_with("postgres:") || url.starts_with("postgresql:") {
            let pool = PgPoolOptions::new()
                .max_connections(max_connections)
                .acquire_timeout(std::time::Duration::from_secs(30))
                .connect(url)
                .await?;
            POSTGRES_MIGRATOR.run(&pool).await?;
            side = Some(std::sync::Arc::new(shared::SidePools::connect(
                url,
                max_connections,
            )?));
            Pool::Postgres(pool)
        } else if url.starts_with("sqlite:") {
            let opts = SqliteConnectOptions::from_str(url)
                .map_err(|e| Error::invalid(format!("bad database URL: {e}")))?
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
                .foreign_keys(true)
                .busy_timeout(std::time::Duration::from_secs(10))
                .synchronous(sqlx::sqlite::SqliteSynchronous::Normal);
            let write = SqlitePoolOptions::new()
                .max_connections(1)
                .connect_with(opts.clone())
                .await?;
            SQLITE_MIGRATOR.run(&write).await?;
            let read = SqlitePoolOptions::new()
                .max_connections(8)
                .connect_with(opts)
                .await?;
            Pool::Sqlite { read, write }
        } else {
            return Err(Error::invalid(format!(
                "unsupported database URL {:?}: use sqlite://path or postgres://host/db",
                url.split('@').next_back().unwrap_or("")
            )));
        };
        Ok(Store { pool, side })
    }

    /// Whether several instances may share this database (PostgreSQL).
    pub fn is_shared(&self) -> bool {
        matches!(self.pool, Pool::Postgres(_))
    }

    pub async fn close(&self) {
        match &self.pool {
            Pool::Sqlite { read, write } => {
                read.close().await;
                write.close().await;
            }
            Pool::Postgres(pool) => {
                pool.close().await;
                if let Some(side) = &self.side {
                    side.close().await;
                }
            }
        }
    }

    // ---- sessions ----

    pub async fn create_session(
        &self,
        title: &str,
        model: &str,
        parent_id: Option<&str>,
        agent_token_hash: &str,
        auto_retry: AutoRetry,
        tools: &[String],
    ) -> Result<Session> {
        let tools = serde_json::to_string(tools).unwrap_or_else(|_| "[]".into());
        with_writer!(self, pool => {
        let id = new_id("s");
        sqlx::query(
            "INSERT INTO sessions (id, title, model, parent_id, agent_token_hash, created_at, auto_retry, tools)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(&id)
        .bind(title)
        .bind(model)
        .bind(parent_id)
        .bind(agent_token_hash)
        .bind(now_ms())
        .bind(auto_retry.as_str())
        .bind(tools)
        .execute(pool)
        .await?;
        Ok(self.session(&id).await?.session)
            })
    }

    pub async fn session(&self, id: &str) -> Result<SessionRecord> {
        with_pool!(self, pool => {
        let row = sqlx::query(&format!("{} WHERE s.id = $1", session_select()))
        .bind(id)
        .fetch_optional(pool)
        .await?
        .ok_or_else(|| Error::not_found("session", id))?;
        Ok(session_from_row(&row))
            })
    }

    /// `not_found` unless the session exists (one indexed lookup, no summary).
    pub async fn session_exists(&self, id: &str) -> Result<()> {
        with_pool!(self, pool => {
        sqlx::query("SELECT 1 FROM sessions WHERE id = $1")
            .bind(id)
            .fetch_optional(pool)
            .await?
            .map(|_| ())
            .ok_or_else(|| Error::not_found("session", id))
            })
    }

    /// What a run's provider request needs of its session: the model, the tokens spent and
    /// the tool sources.
    pub async fn model_and_spend(&self, id: &str) -> Result<(String, i64, Vec<String>)> {
        with_pool!(self, pool => {
        let row = sqlx::query("SELECT model, tokens_used, tools FROM sessions WHERE id = $1")
            .bind(id)
            .fetch_optional(pool)
            .await?
            .ok_or_else(|| Error::not_found("session", id))?;
        Ok((row.text("model"), row.int("tokens_used"), rows::tools(&row)))
            })
    }

    /// Sessions, newest first, one page of them, in one query. `invalid` when `before`
    /// names no session.
    pub async fn sessions(&self, page: &SessionPage) -> Result<Vec<Session>> {
        with_pool!(self, pool => {
        let mut sql = session_select();
        let cursor: Option<i64> = match &page.before {
            Some(id) => Some(
                sqlx::query_scalar("SELECT created_at FROM sessions WHERE id = $1")
                    .bind(id)
                    .fetch_optional(pool)
                    .await?
                    .ok_or_else(|| Error::invalid(format!("`before`: there is no session {id:?}")))?,
            ),
            None => None,
        };
        if cursor.is_some() {
            sql.push_str(" WHERE s.created_at < $1 OR (s.created_at = $1 AND s.id < $2)");
        }
        sql.push_str(" ORDER BY s.created_at DESC, s.id DESC");
        if let Some(limit) = page.limit {
            sql.push_str(&format!(" LIMIT {}", limit.min(MAX_SESSION_PAGE)));
        }
        let mut q = sqlx::query(&sql);
        if let (Some(at), Some(id)) = (cursor, &page.before) {
            q = q.bind(at).bind(id);
        }
        let rows = q.fetch_all(pool).await?;
        Ok(rows.iter().map(|r| session_from_row(r).session).collect())
            })
    }

    /// The session whose agent token has this hash (an indexed lookup).
    pub async fn session_by_token_hash(&self, hash: &str) -> Result<Option<(String, String)>> {
        with_pool!(self, pool => {
        Ok(sqlx::query_as("SELECT id, agent_token_hash FROM sessions WHERE agent_token_hash = $1")
            .bind(hash)
            .fetch_optional(pool)
            .await?)
            })
    }

    /// Every session's `(id, parent_id, agent_token_hash)`, in one light query: what MCP's
    /// caller authority needs (which sessions descend from a token's session).
    pub async fn session_tree(&self) -> Result<Vec<(String, Option<String>, String)>> {
        with_pool!(self, pool => {
        Ok(
            sqlx::query_as("SELECT id, parent_id, agent_token_hash FROM sessions")
                .fetch_all(pool)
                .await?,
        )
            })
    }

    pub async fn update_session(
        &self,
        id: &str,
        title: Option<&str>,
        auto_retry: Option<AutoRetry>,
        tools: Option<&[String]>,
    ) -> Result<Session> {
        let tools = tools.map(|t| serde_json::to_string(t).unwrap_or_else(|_| "[]".into()));
        with_writer!(self, pool => {
        sqlx::query(
            "UPDATE sessions SET title = COALESCE($1, title), auto_retry = COALESCE($2, auto_retry),
                 tools = COALESCE($3, tools)
             WHERE id = $4",
        )
        .bind(title)
        .bind(auto_retry.map(|a| a.as_str()))
        .bind(tools)
        .bind(id)
        .execute(pool)
        .await?;
        Ok(self.session(id).await?.session)
            })
    }

    /// Sets the session's waiting background retry.
    pub async fn set_waiting_retry(&self, session_id: &str, w: &WaitingRetry) -> Result<()> {
        with_writer!(self, pool => {
            let done = sqlx::query(
                "UPDATE sessions SET retry_attempt = $1, retry_fires_at = $2, retry_reason = $3
                 WHERE id = $4",
            )
            .bind(w.attempt as i64)
            .bind(w.fires_at)
            .bind(&w.reason)
            .bind(session_id)
            .execute(pool)
            .await?;
            if done.rows_affected() == 0 {
                return Err(Error::not_found("session", session_id));
            }
            Ok(())
        })
    }

    /// Ends the session's waiting background retry, if one waits (answers whether one did);
    /// its attempt number stays. One statement: no read-then-write race.
    pub async fn clear_waiting_retry(&self, session_id: &str) -> Result<bool> {
        with_writer!(self, pool => {
            let done = sqlx::query(
                "UPDATE sessions SET retry_fires_at = NULL, retry_reason = NULL
                 WHERE id = $1 AND retry_fires_at IS NOT NULL",
            )
            .bind(session_id)
            .execute(pool)
            .await?;
            Ok(done.rows_affected() == 1)
        })
    }

    /// Sessions whose waiting background retry is due at `now`, soonest first.
    pub async fn due_waiting_retries(&self, now: i64) -> Result<Vec<String>> {
        with_pool!(self, pool => {
            Ok(sqlx::query_scalar(
                "SELECT id FROM sessions WHERE retry_fires_at IS NOT NULL AND retry_fires_at <= $1
                 ORDER BY retry_fires_at",
            )
            .bind(now)
            .fetch_all(pool)
            .await?)
        })
    }

    // ---- messages and runs ----

    pub async fn messages(
        &self,
        session_id: &str,
        include_superseded: bool,
    ) -> Result<Vec<Message>> {
        with_pool!(self, pool => {
        let rows = sqlx::query(&format!(
            "SELECT {MESSAGE_COLUMNS} FROM messages m WHERE m.session_id = $1 ORDER BY m.seq"
        ))
        .bind(session_id)
        .fetch_all(pool)
        .await?;
        Ok(rows
            .iter()
            .map(rows::message)
            .filter(|m| include_superseded || !m.superseded)
            .collect())
            })
    }

    pub async fn message(&self, id: &str) -> Result<Message> {
        with_pool!(self, pool => {
        let row = sqlx::query(&format!(
            "SELECT {MESSAGE_COLUMNS} FROM messages m WHERE m.id = $1"
        ))
        .bind(id)
        .fetch_optional(pool)
        .await?
        .ok_or_else(|| Error::not_found("message", id))?;
        Ok(rows::message(&row))
            })
    }

    pub async fn runs(&self, session_id: &str) -> Result<Vec<Run>> {
        with_pool!(self, pool => {
        let rows = sqlx::query("SELECT * FROM runs WHERE session_id = $1 ORDER BY seq")
            .bind(session_id)
            .fetch_all(pool)
            .await?;
        Ok(rows.iter().map(rows::run).collect())
            })
    }

    pub async fn run(&self, id: &str) -> Result<Run> {
        with_pool!(self, pool => {
        let row = sqlx::query("SELECT * FROM runs WHERE id = $1")
            .bind(id)
            .fetch_optional(pool)
            .await?
            .ok_or_else(|| Error::not_found("run", id))?;
        Ok(rows::run(&row))
            })
    }

    pub async fn attempts(&self, run_id: &str) -> Result<Vec<Attempt>> {
        with_pool!(self, pool => {
        let rows = sqlx::query("SELECT * FROM run_attempts WHERE run_id = $1 ORDER BY n")
            .bind(run_id)
            .fetch_all(pool)
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
            })
    }

    /// Records that a run's conversation was compacted after a context overflow.
    pub async fn mark_compacted(&self, run_id: &str) -> Result<()> {
        with_writer!(self, pool => {
        sqlx::query("UPDATE runs SET compacted = TRUE WHERE id = $1")
            .bind(run_id)
            .execute(pool)
            .await?;
        Ok(())
            })
    }

    /// Tier 1 attempt `n` of a run starts.
    pub async fn attempt_started(&self, run_id: &str, n: u32) -> Result<()> {
        with_writer!(self, pool => {
        let mut tx = pool.begin().await?;
        sqlx::query("INSERT INTO run_attempts (run_id, n, started_at) VALUES ($1, $2, $3)
             ON CONFLICT (run_id, n) DO UPDATE
             SET started_at = excluded.started_at, error = NULL, retry_in_ms = NULL")
            .bind(run_id)
            .bind(n as i64)
            .bind(now_ms())
            .execute(&mut *tx)
            .await?;
        sqlx::query("UPDATE runs SET tier1_attempts = $1 WHERE id = $2")
            .bind(n as i64)
            .bind(run_id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
            })
    }

    /// Tier 1 attempt `n` of a run failed; `retry_in_ms` when another follows after that wait.
    pub async fn attempt_failed(
        &self,
        run_id: &str,
        n: u32,
        error: &str,
        retry_in_ms: Option<i64>,
    ) -> Result<()> {
        with_writer!(self, pool => {
        sqlx::query(
            "UPDATE run_attempts SET error = $1, retry_in_ms = $2 WHERE run_id = $3 AND n = $4",
        )
        .bind(error)
        .bind(retry_in_ms)
        .bind(run_id)
        .bind(n as i64)
        .execute(pool)
        .await?;
        Ok(())
            })
    }

    /// In one transaction: an optional new operator message, the supersession of what follows
    /// the anchor (queued and held prompts excepted) and a queued run. Answers the new
    /// message, the run and the superseded message ids.
    pub async fn dispatch(&self, d: NewRun<'_>) -> Result<(Option<Message>, Run, Vec<String>)> {
        with_writer!(self, pool => {
        let mut tx = pool.begin().await?;
        let now = now_ms();
        let message = match &d.new_message {
            Some(content) => {
                let row = sqlx::query(&format!(
                    "INSERT INTO messages (id, session_id, seq, role, content, created_at, provenance)
                     VALUES ($1, $2, (SELECT COALESCE(MAX(seq), 0) + 1 FROM messages WHERE session_id = $2),
                             'operator', $3, $4, $5)
                     RETURNING {NEW_MESSAGE}"
                ))
                .bind(new_id("m"))
                .bind(d.session_id)
                .bind(content)
                .bind(now)
                .bind(rows::provenance_json(&d.message_provenance))
                .fetch_one(&mut *tx)
                .await?;
                Some(rows::message(&row))
            }
            None => None,
        };
        let anchor_id = match (&message, d.anchor_id) {
            (Some(m), _) => m.id.clone(),
            (None, Some(id)) => id.to_string(),
            (None, None) => return Err(Error::internal("a dispatch needs an anchor")),
        };
        let run_id = new_id("r");
        let row = sqlx::query(
            "INSERT INTO runs (id, session_id, seq, anchor_message_id, status, kind, attempt, provenance, created_at,
                               prompt_id, provenance_kind)
             VALUES ($1, $2, (SELECT COALESCE(MAX(seq), 0) + 1 FROM runs WHERE session_id = $2), $3, 'queued', $4, $5, $6, $7,
                     $8, $9)
             RETURNING *",
        )
        .bind(&run_id)
        .bind(d.session_id)
        .bind(&anchor_id)
        .bind(run_kind_str(d.kind))
        .bind(d.attempt as i64)
        .bind(rows::provenance_json(&d.provenance))
        .bind(now)
        .bind(d.provenance.as_ref().and_then(|p| p.prompt_id.as_deref()))
        .bind(d.provenance.as_ref().map(|p| p.kind.as_str()))
        .fetch_one(&mut *tx)
        .await?;
        let run = rows::run(&row);
        let superseded: Vec<String> = if d.supersede_after_anchor {
            sqlx::query_scalar(
                "INSERT INTO supersessions (message_id, by_run_id, at)
                 SELECT m.id, $1, $2 FROM messages m
                 WHERE m.session_id = $3 AND m.seq > (SELECT seq FROM messages WHERE id = $4)
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
        Ok((message, run, superseded))
            })
    }

    /// The latest run anchored on a message.
    pub async fn latest_run_for(&self, anchor_message_id: &str) -> Result<Option<Run>> {
        with_pool!(self, pool => {
        let row =
            sqlx::query("SELECT * FROM runs WHERE anchor_message_id = $1 ORDER BY seq DESC LIMIT 1")
                .bind(anchor_message_id)
                .fetch_optional(pool)
                .await?;
        Ok(row.as_ref().map(rows::run))
            })
    }

    /// How many runs a prompt has had: on itself, and as the origin of automatic resumes.
    pub async fn tries_of(&self, prompt_id: &str) -> Result<u32> {
        with_pool!(self, pool => {
        let n: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM runs WHERE anchor_message_id = $1 OR prompt_id = $2",
        )
        .bind(prompt_id)
        .bind(prompt_id)
        .fetch_one(pool)
        .await?;
        Ok(n as u32)
            })
    }

    /// How many automatic resumes (manual retries included) a prompt has had.
    pub async fn resumes_of(&self, prompt_id: &str) -> Result<u32> {
        with_pool!(self, pool => {
        let n: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM runs WHERE prompt_id = $1 AND provenance_kind = 'auto_resume'",
        )
        .bind(prompt_id)
        .fetch_one(pool)
        .await?;
        Ok(n as u32)
            })
    }

    /// The session's last turn: its latest run not held behind a failure.
    pub async fn last_turn(&self, session_id: &str) -> Result<Option<Run>> {
        with_pool!(self, pool => {
        let row = sqlx::query(
            "SELECT * FROM runs WHERE session_id = $1 AND held_by IS NULL ORDER BY seq DESC LIMIT 1",
        )
        .bind(session_id)
        .fetch_optional(pool)
        .await?;
        Ok(row.as_ref().map(rows::run))
            })
    }

    /// Whether the session has a run running or queued (held prompts excepted).
    pub async fn has_active_run(&self, session_id: &str) -> Result<bool> {
        with_pool!(self, pool => {
        Ok(sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM runs WHERE session_id = $1
                AND (status = 'running' OR (status = 'queued' AND held_by IS NULL)))",
        )
        .bind(session_id)
        .fetch_one(pool)
        .await?)
            })
    }

    /// The run to start next in the session: its oldest queued run that is not held, unless
    /// one is running.
    pub async fn next_to_start(&self, session_id: &str) -> Result<Option<Run>> {
        with_pool!(self, pool => {
        let row = sqlx::query(
            "SELECT * FROM runs WHERE session_id = $1 AND status = 'queued' AND held_by IS NULL
               AND NOT EXISTS (SELECT 1 FROM runs WHERE session_id = $1 AND status = 'running')
             ORDER BY seq LIMIT 1",
        )
        .bind(session_id)
        .fetch_optional(pool)
        .await?;
        Ok(row.as_ref().map(rows::run))
            })
    }

    /// In one transaction: the run becomes `running`, gets an empty streaming reply, and its
    /// first Tier 1 attempt starts (the provider is called next; the runner records the later
    /// ones). `owner` is the instance that executes it (its heartbeat is the run's lease).
    pub async fn start_run(&self, run: &Run, owner: &str) -> Result<(Run, Message)> {
        with_writer!(self, pool => {
        let mut tx = pool.begin().await?;
        let now = now_ms();
        let reply = sqlx::query(&format!(
            "INSERT INTO messages (id, session_id, seq, role, content, created_at, run_id, status, provenance)
             VALUES ($1, $2, (SELECT COALESCE(MAX(seq), 0) + 1 FROM messages WHERE session_id = $2),
                     'agent', '', $3, $4, 'streaming', $5)
             RETURNING {NEW_MESSAGE}"
        ))
        .bind(new_id("m"))
        .bind(&run.session_id)
        .bind(now)
        .bind(&run.id)
        .bind(rows::provenance_json(&run.provenance))
        .fetch_one(&mut *tx)
        .await?;
        let reply = rows::message(&reply);
        sqlx::query(
            "INSERT INTO run_attempts (run_id, n, started_at) VALUES ($1, 1, $2)
             ON CONFLICT (run_id, n) DO UPDATE
             SET started_at = excluded.started_at, error = NULL, retry_in_ms = NULL",
        )
        .bind(&run.id)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        let run = sqlx::query(
            "UPDATE runs SET status = 'running', started_at = $1, reply_message_id = $2, owner = $3,
                 tier1_attempts = 1
             WHERE id = $4 RETURNING *",
        )
        .bind(now)
        .bind(&reply.id)
        .bind(owner)
        .bind(&run.id)
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok((rows::run(&run), reply))
            })
    }

    /// Stores streaming replies' text so far, `(message id, text, delta count)`, in one
    /// transaction (called in batches on a timer, never per delta). A reply that has ended,
    /// or whose stored text is already further on, is left alone.
    pub async fn save_reply_texts(&self, saves: &[(String, String, u64)]) -> Result<()> {
        with_writer!(self, pool => {
        let mut tx = pool.begin().await?;
        for (id, content, seq) in saves {
            sqlx::query(
                "UPDATE messages SET content = $1, delta_seq = $2
                 WHERE id = $3 AND status = 'streaming' AND delta_seq < $2",
            )
            .bind(content)
            .bind(*seq as i64)
            .bind(id)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
            })
    }

    /// In one transaction: the run's end, its reply's final text and status, the session's
    /// spend, and after a failure the hold on the prompts queued behind it. A run that
    /// already ended is left alone (returns `None`).
    pub async fn finish_run(
        &self,
        run_id: &str,
        o: &Outcome,
    ) -> Result<Option<(Run, Option<Message>)>> {
        with_writer!(self, pool => {
        let mut tx = pool.begin().await?;
        let now = now_ms();
        let (retryable, class, until) = retry_columns(&o.retry);
        let done = sqlx::query(
            "UPDATE runs SET status = $1, error_message = $2, retryable = $3, retry_class = $4,
                 retry_after_until = $5, finished_at = $6, tokens_used = tokens_used + $7
             WHERE id = $8 AND status IN ('queued', 'running')
             RETURNING *",
        )
        .bind(run_status_str(o.status))
        .bind(&o.error_message)
        .bind(retryable)
        .bind(class)
        .bind(until)
        .bind(now)
        .bind(o.tokens_used)
        .bind(run_id)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(run) = done.as_ref().map(rows::run) else {
            return Ok(None);
        };
        let msg_status = match o.status {
            RunStatus::Completed => MessageStatus::Complete,
            RunStatus::Cancelled => MessageStatus::Cancelled,
            _ => MessageStatus::Failed,
        };
        let reply = sqlx::query(
            "UPDATE messages SET content = $1, status = $2, error_message = $3, retryable = $4,
                 retry_class = $5, retry_after_until = $6
             WHERE id = $7
             RETURNING *, EXISTS (SELECT 1 FROM supersessions x WHERE x.message_id = messages.id) AS superseded",
        )
        .bind(&o.content)
        .bind(rows::message_status_str(msg_status))
        .bind(&o.error_message)
        .bind(retryable)
        .bind(class)
        .bind(until)
        .bind(&run.reply_message_id)
        .fetch_optional(&mut *tx)
        .await?
        .as_ref()
        .map(rows::message);
        // A call still running when its run ends never got its result: cancelled with the
        // run, else its outcome is unknown.
        sqlx::query(
            "UPDATE tool_calls SET status = $1, finished_at = $2
             WHERE run_id = $3 AND status = 'running'",
        )
        .bind(if o.status == RunStatus::Cancelled { "cancelled" } else { "interrupted" })
        .bind(now)
        .bind(run_id)
        .execute(&mut *tx)
        .await?;
        sqlx::query("UPDATE sessions SET tokens_used = tokens_used + $1 WHERE id = $2")
        .bind(o.tokens_used)
        .bind(&run.session_id)
        .execute(&mut *tx)
        .await?;
        if o.status == RunStatus::Failed {
            // Prompts queued behind a failed turn are held in the same step, so no reader
            // sees the failure with them still free to start.
            sqlx::query(
                "UPDATE runs SET held_by = $1
                 WHERE session_id = (SELECT session_id FROM runs WHERE id = $1)
                   AND status = 'queued' AND held_by IS NULL",
            )
            .bind(run_id)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(Some((run, reply)))
            })
    }

    /// Records the operator's cancel of Tier 2 on a failed run (the first time wins; a repeat
    /// answers the run as it is). `None` when the run is not `failed`.
    pub async fn dismiss_retry(&self, run_id: &str) -> Result<Option<Run>> {
        with_writer!(self, pool => {
        let row = sqlx::query(
            "UPDATE runs SET retry_dismissed_at = COALESCE(retry_dismissed_at, $1)
             WHERE id = $2 AND status = 'failed'
             RETURNING *",
        )
        .bind(now_ms())
        .bind(run_id)
        .fetch_optional(pool)
        .await?;
        Ok(row.as_ref().map(rows::run))
            })
    }

    /// Lets every held prompt of the session go on; answers the released runs, in order.
    pub async fn release_held(&self, session_id: &str) -> Result<Vec<Run>> {
        with_writer!(self, pool => {
        let rows = sqlx::query(
            "UPDATE runs SET held_by = NULL
             WHERE session_id = $1 AND status = 'queued' AND held_by IS NOT NULL
             RETURNING *",
        )
        .bind(session_id)
        .fetch_all(pool)
        .await?;
        let mut released: Vec<(i64, Run)> = rows.iter().map(|r| (r.int("seq"), rows::run(r))).collect();
        released.sort_by_key(|(seq, _)| *seq);
        Ok(released.into_iter().map(|(_, r)| r).collect())
            })
    }

    /// The session's prompts held behind a failed turn (`finish_run` holds them), in order.
    pub async fn held_runs(&self, session_id: &str) -> Result<Vec<Run>> {
        with_pool!(self, pool => {
        let rows = sqlx::query(
            "SELECT * FROM runs WHERE session_id = $1 AND status = 'queued' AND held_by IS NOT NULL ORDER BY seq",
        )
        .bind(session_id)
        .fetch_all(pool)
        .await?;
        Ok(rows.iter().map(rows::run).collect())
            })
    }

    /// The conversation a run sends: every visible message up to and including its anchor,
    /// as `(role, content)`; operator prompts that have not run yet and empty or still
    /// streaming replies are left out. One statement.
    pub async fn history(&self, anchor_message_id: &str) -> Result<Vec<HistoryEntry>> {
        with_pool!(self, pool => {
        let rows: Vec<(String, String, String, bool)> = sqlx::query_as(
            "SELECT m.id, m.role, m.content,
                    EXISTS (SELECT 1 FROM tool_calls t WHERE t.message_id = m.id) AS has_calls
             FROM messages m, messages a
             WHERE a.id = $1 AND m.session_id = a.session_id AND m.seq <= a.seq
               AND NOT EXISTS (SELECT 1 FROM supersessions x WHERE x.message_id = m.id)
               AND CASE WHEN m.role = 'operator' THEN
                     m.id = a.id
                     OR NOT EXISTS (SELECT 1 FROM runs r WHERE r.anchor_message_id = m.id)
                     OR EXISTS (SELECT 1 FROM runs r WHERE r.anchor_message_id = m.id
                                AND r.started_at IS NOT NULL)
                   ELSE COALESCE(m.status, '') <> 'streaming'
                        AND (m.content <> ''
                             OR EXISTS (SELECT 1 FROM tool_calls t WHERE t.message_id = m.id)) END
             ORDER BY m.seq",
        )
        .bind(anchor_message_id)
        .fetch_all(pool)
        .await?;
        if rows.is_empty() {
            // The anchor itself always belongs: nothing means there is no such message.
            return Err(Error::not_found("message", anchor_message_id));
        }
        Ok(rows
            .into_iter()
            .map(|(id, role, content, has_calls)| HistoryEntry {
                id,
                has_calls,
                role: if role == "operator" { app::wire::Role::Operator } else { app::wire::Role::Agent },
                content,
            })
            .collect())
            })
    }

    /// Runs that were `running` when the server stopped: their ids and session ids.
    pub async fn runs_left_running(&self) -> Result<Vec<Run>> {
        with_pool!(self, pool => {
        let rows = sqlx::query("SELECT * FROM runs WHERE status = 'running' ORDER BY seq")
            .fetch_all(pool)
            .await?;
        Ok(rows.iter().map(rows::run).collect())
            })
    }

    /// Runs recorded `running` with `owner` as the instance executing them.
    pub async fn running_runs_of(&self, owner: &str) -> Result<Vec<Run>> {
        with_pool!(self, pool => {
        let rows = sqlx::query("SELECT * FROM runs WHERE status = 'running' AND owner = $1 ORDER BY seq")
            .bind(owner)
            .fetch_all(pool)
            .await?;
        Ok(rows.iter().map(rows::run).collect())
            })
    }

    /// Sessions with a queued run that is free to start.
    pub async fn sessions_with_queued_runs(&self) -> Result<Vec<String>> {
        with_pool!(self, pool => {
        let rows = sqlx::query(
            "SELECT DISTINCT session_id FROM runs WHERE status = 'queued' AND held_by IS NULL",
        )
        .fetch_all(pool)
        .await?;
        Ok(rows.iter().map(|r| r.get("session_id")).collect())
            })
    }

    // ---- event log ----

    pub async fn max_event_id(&self) -> Result<i64> {
        with_pool!(self, pool => {
        Ok(
            sqlx::query_scalar("SELECT COALESCE(MAX(id), 0) FROM events")
                .fetch_one(pool)
                .await?,
        )
            })
    }

    /// Appends a batch of events in one transaction.
    pub async fn append_events(&self, batch: &[&LoggedEvent]) -> Result<()> {
        with_writer!(self, pool => {
        let mut tx = pool.begin().await?;
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
            })
    }

    /// Deletes the `delta` events of each session logged before the given id (a run's end:
    /// a session runs one run at a time, so every delta before it belongs to an ended run,
    /// whose reply and `message` events hold the text). Answers how many went.
    pub async fn prune_deltas(&self, ends: &[(String, i64)]) -> Result<u64> {
        with_writer!(self, pool => {
        let mut tx = pool.begin().await?;
        let mut n = 0;
        for (session_id, end_id) in ends {
            n += sqlx::query("DELETE FROM events WHERE session_id = $1 AND id < $2 AND name = 'delta'")
                .bind(session_id)
                .bind(end_id)
                .execute(&mut *tx)
                .await?
                .rows_affected();
        }
        tx.commit().await?;
        Ok(n)
            })
    }

    /// The session's logged events with `after < id < before`, in order.
    pub async fn events_between(
        &self,
        session_id: &str,
        after: i64,
        before: i64,
    ) -> Result<Vec<LoggedEvent>> {
        with_pool!(self, pool => {
        let rows = sqlx::query(
            "SELECT id, name, data FROM events WHERE session_id = $1 AND id > $2 AND id < $3 ORDER BY id",
        )
        .bind(session_id)
        .bind(after)
        .bind(before)
        .fetch_all(pool)
        .await?;
        Ok(rows.iter().filter_map(|r| logged_event(r, session_id.to_string())).collect())
            })
    }
}

/// A row of [`session_select`] as the server sees it.
fn session_from_row<R: Get>(row: &R) -> SessionRecord {
    let last_run = row
        .opt_text("lr_id")
        .map(|_| rows::run(&rows::Prefixed(row, "lr_")).summary());
    SessionRecord {
        session: Session {
            id: row.text("id"),
            title: row.text("title"),
            model: row.text("model"),
            parent_id: row.opt_text("parent_id"),
            status: if row.flag("busy") {
                SessionStatus::Running
            } else {
                SessionStatus::Idle
            },
            created_at: row.int("created_at"),
            last_run,
            auto_retry: AutoRetry::parse(&row.text("auto_retry")).unwrap_or_default(),
            waiting_retry: row.opt_int("retry_fires_at").map(|fires_at| WaitingRetry {
                attempt: row.int("retry_attempt") as u32,
                fires_at,
                reason: row.opt_text("retry_reason").unwrap_or_default(),
            }),
            tools: rows::tools(row),
        },
        agent_token_hash: row.text("agent_token_hash"),
        tokens_used: row.int("tokens_used"),
        retry_attempt: row.int("retry_attempt") as u32,
    }
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

/// An event row (`id`, `name`, `data`) of `session_id`; `None` for an unknown name.
fn logged_event(row: &impl Get, session_id: String) -> Option<LoggedEvent> {
    Some(LoggedEvent {
        id: row.int("id"),
        session_id,
        name: static_event_name(&row.text("name"))?,
        data: row.text("data"),
    })
}

fn static_event_name(name: &str) -> Option<&'static str> {
    app::wire::EVENT_NAMES.iter().copied().find(|n| *n == name)
}
