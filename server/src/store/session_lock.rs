//! The cross-instance session lock (PostgreSQL): a row in `session_locks`, taken by one
//! statement, renewed while held and lapsing by itself if its instance dies, so that no lock
//! pins a connection. On SQLite the engine's in-process lock is the whole story.
use super::shared::DB_NOW_MS;
use super::{Pool, Result, Store, StoreError};
use app::wire::SessionId;
use sqlx::postgres::PgPool;
use std::time::Duration;

/// A held session lock lapses this long after its last renewal (its holder renews it every
/// third of it), so a lock whose instance died frees itself.
const LOCK_TTL_MS: i64 = 30_000;

/// A session's lock, held as a row in `session_locks`; released (the row deleted) when
/// dropped, and renewed while held. If this instance dies the row lapses by itself.
pub struct SessionLock {
    pool: PgPool,
    session_id: String,
    holder: String,
    _renew: tokio_util::sync::DropGuard,
}

impl Drop for SessionLock {
    fn drop(&mut self) {
        let pool = self.pool.clone();
        let session_id = std::mem::take(&mut self.session_id);
        let holder = std::mem::take(&mut self.holder);
        tokio::spawn(async move {
            if let Err(e) = release_lock(&pool, &session_id, &holder).await {
                tracing::warn!(error = %e, session_id = %session_id, "could not release a session lock; it lapses by itself");
            }
        });
    }
}

async fn release_lock(pool: &PgPool, session_id: &str, holder: &str) -> sqlx::Result<()> {
    sqlx::query("DELETE FROM session_locks WHERE session_id = $1 AND holder = $2")
        .bind(session_id)
        .bind(holder)
        .execute(pool)
        .await
        .map(|_| ())
}

/// One try to take a session's lock: one statement, which takes a free or lapsed lock.
async fn try_lock(pool: &PgPool, session_id: &str, holder: &str) -> sqlx::Result<bool> {
    let taken: Option<String> = sqlx::query_scalar(&format!(
        "INSERT INTO session_locks (session_id, holder, expires_at) VALUES ($1, $2, {DB_NOW_MS} + $3)
         ON CONFLICT (session_id) DO UPDATE
             SET holder = excluded.holder, expires_at = excluded.expires_at
             WHERE session_locks.expires_at < {DB_NOW_MS}
         RETURNING holder"
    ))
    .bind(session_id)
    .bind(holder)
    .bind(LOCK_TTL_MS)
    .fetch_optional(pool)
    .await?;
    Ok(taken.is_some())
}

/// A try whose waiter may be dropped at any point (a client hanging up): the statement runs
/// in a task of its own, and a lock it took for a waiter who is gone is released at once.
async fn try_lock_detached(pool: &PgPool, session_id: &SessionId, holder: &str) -> Result<bool> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let (pool, sid, who) = (pool.clone(), session_id.to_string(), holder.to_string());
    tokio::spawn(async move {
        let got = try_lock(&pool, &sid, &who).await;
        if let Err(Ok(true)) = tx.send(got) {
            let _ = release_lock(&pool, &sid, &who).await;
        }
    });
    match rx.await {
        Ok(got) => Ok(got?),
        Err(_) => Err(StoreError::internal("a session lock attempt was lost")),
    }
}

/// Renews a held lock every third of its lifetime until `stop`.
fn renew_lock(pool: PgPool, session_id: String, holder: String) -> tokio_util::sync::DropGuard {
    let stop = tokio_util::sync::CancellationToken::new();
    let guard = stop.clone().drop_guard();
    tokio::spawn(async move {
        let period = Duration::from_millis(LOCK_TTL_MS as u64 / 3);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(period) => {}
            }
            let renewed = sqlx::query(&format!(
                "UPDATE session_locks SET expires_at = {DB_NOW_MS} + $3
                 WHERE session_id = $1 AND holder = $2"
            ))
            .bind(&session_id)
            .bind(&holder)
            .bind(LOCK_TTL_MS)
            .execute(&pool)
            .await;
            if let Err(e) = renewed {
                tracing::warn!(error = %e, session_id = %session_id, "could not renew a session lock");
            }
        }
    });
    guard
}

impl Store {
    /// Takes the session's lock across instances (PostgreSQL), waiting until `deadline` at
    /// most; `Ok(None)` on SQLite, where the engine's in-process lock is the whole story, and
    /// `Err` with [`Kind::Busy`](crate::error::Kind::Busy) past the deadline. No connection
    /// is held while it waits or while the lock is held: a lock is a row, taken by one
    /// statement, polled with a backoff (2 ms doubling to 50 ms).
    pub async fn lock_session(
        &self,
        session_id: &SessionId,
        deadline: tokio::time::Instant,
    ) -> Result<Option<SessionLock>> {
        let Pool::Postgres(pool) = &self.pool else {
            return Ok(None);
        };
        let holder = crate::clock::new_id("lk");
        let mut pause = Duration::from_millis(2);
        loop {
            let attempt = try_lock_detached(pool, session_id, &holder);
            match tokio::time::timeout_at(deadline, attempt).await {
                Ok(Ok(true)) => break,
                Ok(Ok(false)) => {}
                Ok(Err(e)) => return Err(e),
                Err(_) => return Err(StoreError::busy(session_id)),
            }
            if tokio::time::Instant::now() + pause >= deadline {
                return Err(StoreError::busy(session_id));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(50));
        }
        Ok(Some(SessionLock {
            pool: pool.clone(),
            session_id: session_id.to_string(),
            _renew: renew_lock(pool.clone(), session_id.to_string(), holder.clone()),
            holder,
        }))
    }
}
