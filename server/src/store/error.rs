//! The store's errors: what a caller can act on (not found, invalid, conflict, busy), a
//! constraint the database enforced (by its kind and name), and a database failure with its
//! cause kept. `crate::error::Error` takes them in, logging a failure's cause once.
use crate::error::{Error, Kind};
use sqlx::error::ErrorKind;

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Which kind of constraint refused a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Constraint {
    Unique,
    ForeignKey,
    NotNull,
    Check,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("no {what} with id {id:?}")]
    NotFound { what: String, id: String },
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Conflict(String),
    /// The session's lock stayed taken past the wait's bound.
    #[error("session {0} is busy with another request; try again in a moment")]
    Busy(String),
    /// A constraint refused the write; `name` as the migrations (or the database) gave it.
    #[error("the database refused the write ({kind:?} constraint {name})")]
    Refused {
        kind: Constraint,
        name: String,
        #[source]
        source: sqlx::Error,
    },
    #[error("the database failed: {0}")]
    Database(#[source] sqlx::Error),
    /// The database did not answer: down, unreachable, its connections all gone.
    #[error("the database does not answer: {0}")]
    Unavailable(#[source] sqlx::Error),
    /// The database's disk is full (SQLite's `SQLITE_FULL`, PostgreSQL's `53100`).
    #[error("the database's disk is full: {0}")]
    Full(#[source] sqlx::Error),
    #[error("database migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// A broken promise of the store's own (a row that must exist did not, a bound passed).
    #[error("{0}")]
    Internal(String),
}

impl StoreError {
    pub fn not_found(what: &str, id: impl std::fmt::Display) -> Self {
        StoreError::NotFound {
            what: what.to_string(),
            id: id.to_string(),
        }
    }
    pub fn invalid(message: impl Into<String>) -> Self {
        StoreError::Invalid(message.into())
    }
    pub fn conflict(message: impl Into<String>) -> Self {
        StoreError::Conflict(message.into())
    }
    pub fn busy(session_id: impl std::fmt::Display) -> Self {
        StoreError::Busy(session_id.to_string())
    }
    pub fn internal(message: impl Into<String>) -> Self {
        StoreError::Internal(message.into())
    }

    /// The constraint that refused the write, if one did.
    pub fn constraint(&self) -> Option<Constraint> {
        match self {
            StoreError::Refused { kind, .. } => Some(*kind),
            _ => None,
        }
    }
}

/// What a database failure says about the database: `Some(true)` its disk is full,
/// `Some(false)` it does not answer, `None` neither (a statement failed).
fn outage_of(e: &sqlx::Error) -> Option<bool> {
    match e {
        sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_) => Some(false),
        sqlx::Error::Database(db) => {
            let code = db.code()?;
            match code.as_ref() {
                // SQLite: SQLITE_FULL, with its extended codes.
                c if c == "13" || c.parse::<u32>().is_ok_and(|n| n & 0xff == 13) => Some(true),
                // SQLite: SQLITE_IOERR (and extended), SQLITE_CANTOPEN.
                c if c.parse::<u32>().is_ok_and(|n| matches!(n & 0xff, 10 | 14)) => Some(false),
                // PostgreSQL: disk_full, and the classes of a server going away or not
                // taking connections (08 connection exception, 57P0x shutdown, 53300 too many
                // connections).
                "53100" => Some(true),
                c if c.starts_with("08") || c.starts_with("57P") || c == "53300" => Some(false),
                _ => None,
            }
        }
        _ => None,
    }
}

/// When (on [`fault_clock`]) the latest storage fault (a full disk, an I/O error, a lost
/// connection) was seen, in this process: a SQLite connection that was open then may hold
/// what the fault left (a transaction half open, a statement holding an old snapshot), so
/// it is closed instead of going back to its pool ([`outlived_a_fault`]).
static LAST_FAULT_MS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Milliseconds since the first look at this clock (monotonic).
fn fault_clock() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let start = START.get_or_init(std::time::Instant::now);
    u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX)
}

fn fault_seen() {
    // At least 1: 0 means no fault yet.
    LAST_FAULT_MS.fetch_max(fault_clock().max(1), std::sync::atomic::Ordering::Relaxed);
}

/// Whether a connection `age` old was open when the latest storage fault was seen.
pub(super) fn outlived_a_fault(age: std::time::Duration) -> bool {
    let at = LAST_FAULT_MS.load(std::sync::atomic::Ordering::Relaxed);
    if at == 0 {
        return false;
    }
    let since = fault_clock().saturating_sub(at);
    u64::try_from(age.as_millis()).unwrap_or(u64::MAX) >= since
}

/// Whether SQLite answered that another connection holds the lock it needs (`SQLITE_BUSY`,
/// `SQLITE_LOCKED` and their extended codes), past the busy timeout: the database does not
/// answer for now, and the connection is sound (the statement's transaction rolls back).
fn locked(e: &sqlx::Error) -> bool {
    let sqlx::Error::Database(db) = e else {
        return false;
    };
    if db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_none() {
        return false;
    }
    db.code()
        .and_then(|c| c.parse::<u32>().ok())
        .is_some_and(|n| matches!(n & 0xff, 5 | 6))
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        if locked(&e) {
            return StoreError::Unavailable(e);
        }
        match outage_of(&e) {
            Some(true) => {
                fault_seen();
                return StoreError::Full(e);
            }
            Some(false) => {
                fault_seen();
                return StoreError::Unavailable(e);
            }
            None => {}
        }
        let refused = match &e {
            sqlx::Error::Database(db) => {
                let kind = match db.kind() {
                    ErrorKind::UniqueViolation => Some(Constraint::Unique),
                    ErrorKind::ForeignKeyViolation => Some(Constraint::ForeignKey),
                    ErrorKind::NotNullViolation => Some(Constraint::NotNull),
                    ErrorKind::CheckViolation => Some(Constraint::Check),
                    _ => None,
                };
                kind.map(|kind| (kind, db.constraint().unwrap_or("unnamed").to_string()))
            }
            _ => None,
        };
        match refused {
            Some((kind, name)) => StoreError::Refused {
                kind,
                name,
                source: e,
            },
            None => StoreError::Database(e),
        }
    }
}

/// What the engine and the API see: a caller's error as its kind; a failure of the
/// database logged here, once, with its cause, and answered without it.
impl From<StoreError> for Error {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound { what, id } => Error::not_found(&what, &id),
            StoreError::Invalid(m) => Error::invalid(m),
            StoreError::Conflict(m) => Error::conflict(m),
            StoreError::Busy(session) => Error::busy(&session),
            StoreError::Internal(m) => Error::internal(m),
            StoreError::Migrate(_) => Error::internal(e.to_string()),
            StoreError::Refused { ref source, .. } => {
                tracing::error!(error = %e, cause = %source, "database error");
                Error::internal("the database failed; see the server log")
            }
            StoreError::Database(_) => {
                tracing::error!(error = %e, "database error");
                Error::internal("the database failed; see the server log")
            }
            StoreError::Unavailable(_) => {
                tracing::warn!(error = %e, "the database does not answer");
                Error::new(
                    Kind::Unavailable,
                    "the database does not answer; nothing was done: try again in a moment",
                )
            }
            StoreError::Full(_) => {
                tracing::error!(error = %e, "the database's disk is full");
                Error::new(
                    Kind::StorageFull,
                    "the database's disk is full; nothing was written: free space on it, then try again",
                )
            }
        }
    }
}

impl From<sqlx::Error> for Error {
    fn from(e: sqlx::Error) -> Self {
        StoreError::from(e).into()
    }
}

impl From<sqlx::migrate::MigrateError> for Error {
    fn from(e: sqlx::migrate::MigrateError) -> Self {
        Error::internal(format!("database migration failed: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_refused_write_names_its_constraint_and_the_api_hides_it() {
        let pool = sqlx::SqlitePool::connect("sqlite::memory:").await.unwrap();
        sqlx::query("CREATE TABLE t (id TEXT CONSTRAINT t_id PRIMARY KEY)")
            .execute(&pool)
            .await
            .unwrap();
        let insert = || sqlx::query("INSERT INTO t (id) VALUES ('a')").execute(&pool);
        insert().await.unwrap();
        let e = StoreError::from(insert().await.unwrap_err());
        assert_eq!(e.constraint(), Some(Constraint::Unique), "{e:?}");
        let api = Error::from(e);
        assert_eq!(api.kind, Kind::Internal);
        assert!(!api.message.contains("t_id"), "{}", api.message);

        let gone = StoreError::from(sqlx::Error::RowNotFound);
        assert!(matches!(gone, StoreError::Database(_)));
        assert_eq!(Error::from(StoreError::busy("s1")).kind, Kind::Busy);
    }
}
