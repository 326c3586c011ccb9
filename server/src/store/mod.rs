//! The store: every read and write of Mulligan's state goes through [`Store`], on SQLite (the
//! embedded default) or PostgreSQL (several instances on one database). The SQL is written
//! once, in the dialect both accept (`$n` parameters, `ON CONFLICT`, `RETURNING`);
//! `with_pool!` runs a body against whichever pool is open. One file per aggregate:
//! `sessions`, `messages`, `runs` (with `run_reads`, `starts` and their `attempts`),
//! `tool_calls`, `events` (the event log, `notify` its notifications) and `cooldowns`; `rows` maps rows to wire types,
//! `script` sends a transaction's statements together (one trip on SQLite), `shared` holds what several PostgreSQL instances share (session locks, notifications).
mod agent_asks;
mod agent_sessions;
mod approvals;
mod attempts;
mod cancels;
mod cooldowns;
mod ends;
mod error;
mod events;
mod messages;
mod notify;
mod outages;
mod rows;
mod run_reads;
mod runs;
mod script;
mod session_lock;
mod session_pages;
mod sessions;
mod shared;
mod starts;
mod tool_calls;

use crate::clock::{new_id, now_ms};
use app::wire::{
    ApprovalMode, Attempt, AutoRetry, Message, MessageStatus, Provenance, RetryClass,
    RetryClassification, Run, RunKind, RunStatus, Session, SessionStatus, ToolGrant, WaitingRetry,
};
pub use error::{Constraint, Result, StoreError};
use rows::Get;
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions};
use sqlx::Row;
use std::str::FromStr;

pub use agent_sessions::AgentSession;
pub use approvals::{Decided, NewDecision, NotDecided};
pub use ends::{EndBy, Finished, Outcome};
pub use events::LoggedEvent;
pub use messages::HistoryEntry;
pub use notify::{decode as decode_notification, Notified};
pub use runs::{Dispatched, NewRun};
pub use session_lock::SessionLock;
pub use session_pages::{SessionPage, MAX_SESSION_PAGE};
pub use sessions::{NewSession, SessionCall, SessionChange, SessionRecord};
pub use shared::{CANCEL_CHANNEL, EVENTS_CHANNEL, LEASE_MS, SIDE_CONNECTIONS};
pub use starts::Started;
pub use tool_calls::{parts, AskedCall, NewToolCall, RecordedCall};

static SQLITE_MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/sqlite");
static POSTGRES_MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/postgres");

#[derive(Clone)]
pub struct Store {
    pool: Pool,
    /// PostgreSQL only: the connections that must never wait behind the main pool.
    side: Option<std::sync::Arc<shared::SidePools>>,
}

pub use crate::config::DEFAULT_MAX_CONNECTIONS;
/// The smallest budget an instance can work with: two connections for the main pool.
pub const MIN_CONNECTIONS: u32 = SIDE_CONNECTIONS + 2;

#[derive(Clone)]
enum Pool {
    /// Readers side by side (WAL), and every write through one connection: writers queue in
    /// order here instead of meeting `SQLITE_BUSY` and sleeping in SQLite's busy handler.
    Sqlite {
        read: SqlitePool,
        write: SqlitePool,
        /// No provider cooldown in this database ends after this time (ms): this process is
        /// the database's one writer, so a request after it needs no lookup.
        cooldowns_end: std::sync::Arc<std::sync::atomic::AtomicI64>,
    },
    Postgres(PgPool),
}

/// Runs `$body` with `$pool` bound to the open pool, whichever backend it is (the body is
/// compiled once per backend, so rows and transactions keep their concrete types). For reads;
/// a body that writes uses [`with_writer!`]. Written like a closure,
/// `with_pool!(self, |pool| { … })`, so that rustfmt formats the body; it is not one.
macro_rules! with_pool {
    ($store:expr, |$pool:ident| $body:expr) => {
        match &$store.pool {
            Pool::Sqlite { read: $pool, .. } => $body,
            Pool::Postgres($pool) => $body,
        }
    };
}
pub(crate) use with_pool;

/// [`with_pool!`] for a body that writes: SQLite's one writer connection.
macro_rules! with_writer {
    ($store:expr, |$pool:ident| $body:expr) => {
        match &$store.pool {
            Pool::Sqlite { write: $pool, .. } => $body,
            Pool::Postgres($pool) => $body,
        }
    };
}
pub(crate) use with_writer;

/// [`with_writer!`] for a body whose one transaction must outlast a power cut once it
/// commits: a tool call's start (the call is sent next, and must never run again) and an
/// operator's decision. SQLite runs with `synchronous = NORMAL` (a commit survives a crash
/// of the process, not of the machine); this commit alone waits for the disk (`FULL`).
/// PostgreSQL commits durably anyway. The body gets a connection to `begin()` on.
macro_rules! with_durable_writer {
    ($store:expr, |$pool:ident| $body:expr) => {
        match &$store.pool {
            Pool::Sqlite { write, .. } => {
                use sqlx::Connection as _;
                let mut conn = write.acquire().await?;
                sqlx::query("PRAGMA synchronous = FULL")
                    .execute(&mut *conn)
                    .await?;
                let answer: Result<_> = async {
                    let $pool = &mut *conn;
                    $body
                }
                .await;
                // Back to the default for every other write (a failed reset leaves this
                // connection slower, never less durable).
                let _ = sqlx::query("PRAGMA synchronous = NORMAL")
                    .execute(&mut *conn)
                    .await;
                answer
            }
            Pool::Postgres($pool) => $body,
        }
    };
}
pub(crate) use with_durable_writer;

/// Text as PostgreSQL can store it: its `TEXT` cannot hold U+0000, which becomes U+FFFD
/// (CONTRACT §3). Any other text, and any text on SQLite, is kept as it is.
pub fn pg_text(text: &str) -> std::borrow::Cow<'_, str> {
    if text.contains('\0') {
        text.replace('\0', "\u{FFFD}").into()
    } else {
        text.into()
    }
}

impl Store {
    /// `text` as this backend stores it ([`pg_text`] on PostgreSQL, as is on SQLite).
    pub fn storable<'a>(&self, text: &'a str) -> std::borrow::Cow<'a, str> {
        match self.pool {
            Pool::Postgres(_) => pg_text(text),
            Pool::Sqlite { .. } => text.into(),
        }
    }

    /// [`Store::storable`] of an optional text, owned (for a bind).
    fn storable_opt(&self, text: Option<&str>) -> Option<String> {
        text.map(|t| self.storable(t).into_owned())
    }
}

const MESSAGE_COLUMNS: &str = "m.*,
    EXISTS (SELECT 1 FROM supersessions x WHERE x.message_id = m.id) AS superseded";

/// Whether a SQLite connection may go back to its pool, or out of it: not when it was open
/// at the latest storage fault (a full disk, an I/O error), which may have left it inside a
/// transaction that never ends or on an old snapshot. Closing it ends both; the pool opens a
/// new one. Checked on release and again on acquire (a connection released just before its
/// error was seen is caught there). An atomic read, no trip to the connection's thread.
fn fresh(meta: sqlx::pool::PoolConnectionMetadata) -> bool {
    !error::outlived_a_fault(meta.age)
}

/// The longest a statement waits for a connection of the main pool (PostgreSQL).
const ACQUIRE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(4);
/// How long a SQLite statement waits for a lock another process holds (a backup, a
/// `sqlite3` shell) before it gives up with `SQLITE_BUSY`, answered `database.unavailable`.
/// With [`SQLITE_ACQUIRE_TIMEOUT`] (a request queued behind a writer that waits so) a
/// request answers within CONTRACT §2's 5 s.
const SQLITE_BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);
/// How long a request waits for one of SQLite's connections (the one writer, the readers).
const SQLITE_ACQUIRE_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(2500);

impl Store {
    /// Opens (creating if needed) the database and runs the migrations. PostgreSQL's
    /// migrator holds an advisory lock, so instances starting together do not race them.
    pub async fn open(url: &str) -> Result<Store> {
        Store::open_with(url, DEFAULT_MAX_CONNECTIONS, "mulligan").await
    }

    /// [`Store::open`] with the connection budget of this instance on PostgreSQL (ignored
    /// on SQLite): `max_connections` in all, heartbeat and `LISTEN` connections included
    /// (at least [`MIN_CONNECTIONS`]). `name` is the `application_name` its connections
    /// carry, so `pg_stat_activity` tells instances apart.
    pub async fn open_with(url: &str, max_connections: u32, name: &str) -> Result<Store> {
        let budget = max_connections.max(MIN_CONNECTIONS);
        let mut side = None;
        let pool = if url.starts_with("postgres:") || url.starts_with("postgresql:") {
            let opts = sqlx::postgres::PgConnectOptions::from_str(url)
                .map_err(|e| StoreError::invalid(format!("bad database URL: {e}")))?
                .application_name(name);
            let pool = PgPoolOptions::new()
                .max_connections(budget - SIDE_CONNECTIONS)
                // Nothing holds a connection for long (no lock, stream or run keeps one), so a
                // wait this long means the database is down or the budget far too small: the
                // request answers `database.unavailable` (CONTRACT §2: within 5 s).
                .acquire_timeout(ACQUIRE_TIMEOUT)
                .connect_with(opts.clone())
                .await?;
            POSTGRES_MIGRATOR.run(&pool).await?;
            side = Some(std::sync::Arc::new(shared::SidePools::connect(&opts)));
            Pool::Postgres(pool)
        } else if url.starts_with("sqlite:") {
            let opts = SqliteConnectOptions::from_str(url)
                .map_err(|e| StoreError::invalid(format!("bad database URL: {e}")))?
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
                .foreign_keys(true)
                .busy_timeout(SQLITE_BUSY_TIMEOUT)
                .synchronous(sqlx::sqlite::SqliteSynchronous::Normal);
            // No ping before each use: a SQLite connection is a file this process holds
            // open, and sqlx's ping is one more hop to the connection's thread per acquire.
            let write = SqlitePoolOptions::new()
                .max_connections(1)
                .acquire_timeout(SQLITE_ACQUIRE_TIMEOUT)
                .test_before_acquire(false)
                .after_release(|_, meta| Box::pin(async move { Ok(fresh(meta)) }))
                .before_acquire(|_, meta| Box::pin(async move { Ok(fresh(meta)) }))
                .connect_with(opts.clone())
                .await?;
            SQLITE_MIGRATOR.run(&write).await?;
            let read = SqlitePoolOptions::new()
                .max_connections(8)
                .acquire_timeout(SQLITE_ACQUIRE_TIMEOUT)
                .test_before_acquire(false)
                .after_release(|_, meta| Box::pin(async move { Ok(fresh(meta)) }))
                .before_acquire(|_, meta| Box::pin(async move { Ok(fresh(meta)) }))
                .connect_with(opts)
                .await?;
            let end: Option<i64> = sqlx::query_scalar("SELECT MAX(until) FROM cooldowns")
                .fetch_one(&read)
                .await?;
            Pool::Sqlite {
                read,
                write,
                cooldowns_end: std::sync::Arc::new(end.unwrap_or(0).into()),
            }
        } else {
            return Err(StoreError::invalid(format!(
                "unsupported database URL {:?}: use sqlite://path or postgres://host/db",
                url.split('@').next_back().unwrap_or("")
            )));
        };
        Ok(Store { pool, side })
    }

    /// One round trip to the database (`/readyz`).
    pub async fn ping(&self) -> Result<()> {
        with_pool!(self, |pool| {
            sqlx::query("SELECT 1").execute(pool).await?;
            Ok(())
        })
    }

    /// Whether the database takes a write now, writing nothing: on SQLite the write lock
    /// taken and let go (`BEGIN IMMEDIATE`, then a rollback), on PostgreSQL a transaction
    /// id assigned (which a standby refuses) and rolled back.
    pub async fn takes_writes(&self) -> Result<()> {
        match &self.pool {
            Pool::Sqlite { write, .. } => {
                let tx = write.begin_with("BEGIN IMMEDIATE").await?;
                tx.rollback().await?;
            }
            Pool::Postgres(pool) => {
                let mut tx = pool.begin().await?;
                sqlx::query("SELECT txid_current()")
                    .execute(&mut *tx)
                    .await?;
                tx.rollback().await?;
            }
        }
        Ok(())
    }

    /// Whether several instances may share this database (PostgreSQL).
    pub fn is_shared(&self) -> bool {
        matches!(self.pool, Pool::Postgres(_))
    }

    pub async fn close(&self) {
        match &self.pool {
            Pool::Sqlite { read, write, .. } => {
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
}
