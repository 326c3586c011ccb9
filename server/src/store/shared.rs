//! What several instances on one PostgreSQL database need from the store: the cross-instance
//! session lock, the ordered event log they all follow, heartbeats (the leases on the runs
//! each executes) and cancel requests. On SQLite (one instance) these are no-ops or empty.
use super::{rows, LoggedEvent, Pool, Store};
use crate::clock::now_ms;
use crate::error::Result;
use app::wire::Run;
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::{Postgres, Row};
use std::time::Duration;

/// Notification channel: new events are in the log.
pub const EVENTS_CHANNEL: &str = "mulligan_events";
/// Notification channel: a run was asked to stop (payload: its id).
pub const CANCEL_CHANNEL: &str = "mulligan_cancel";
/// `LISTEN` connections an instance keeps: the event follower's and the cancel listener's.
const LISTENERS: u32 = 2;

/// Connections kept apart from the main pool, so that no load on it can starve them:
/// - `locks`: each held session lock keeps one connection here while the work it guards
///   uses the main pool, so locked work never waits for a connection its own lock holds
///   (with one pool, as many concurrent locks as connections deadlocked it). Bounded: a
///   lock beyond its size waits for a free connection, never for work that needs one.
/// - `beat`: one connection for heartbeats, so a busy pool never lets this instance's
///   lease lapse (and another instance declare it dead).
/// - `listen`: the `LISTEN` connections (events, cancels), which a listener keeps for its
///   whole life and would otherwise take from the main pool.
pub(super) struct SidePools {
    locks: PgPool,
    beat: PgPool,
    listen: PgPool,
}

impl SidePools {
    pub(super) fn connect(url: &str, locks: u32) -> Result<SidePools> {
        Ok(SidePools {
            locks: PgPoolOptions::new()
                .max_connections(locks)
                // A lock waits its turn for a connection: holders are making progress.
                .acquire_timeout(Duration::from_secs(300))
                .connect_lazy(url)?,
            beat: PgPoolOptions::new()
                .max_connections(1)
                .acquire_timeout(Duration::from_secs(5))
                .connect_lazy(url)?,
            listen: PgPoolOptions::new()
                // Room for a listener reconnecting while its old connection still closes.
                .max_connections(2 * LISTENERS)
                .acquire_timeout(Duration::from_secs(10))
                .connect_lazy(url)?,
        })
    }

    pub(super) async fn close(&self) {
        self.locks.close().await;
        self.beat.close().await;
        self.listen.close().await;
    }
}

/// Holds a session's advisory lock on one connection; released when dropped (and by the
/// server if the connection or the instance dies, so a crash never leaves a session locked).
pub struct SessionLock {
    conn: Option<PoolConnection<Postgres>>,
    key: String,
}

impl Drop for SessionLock {
    fn drop(&mut self) {
        if let Some(mut conn) = self.conn.take() {
            let key = std::mem::take(&mut self.key);
            tokio::spawn(async move {
                let unlocked = sqlx::query("SELECT pg_advisory_unlock(1, hashtext($1))")
                    .bind(&key)
                    .execute(&mut *conn)
                    .await;
                if unlocked.is_err() {
                    // Closing the connection releases the lock for sure.
                    let _ = conn.close().await;
                }
            });
        }
    }
}

impl Store {
    /// Takes the session's lock across instances (PostgreSQL); `None` on SQLite, where the
    /// engine's in-process lock is the whole story.
    pub async fn lock_session(&self, session_id: &str) -> Result<Option<SessionLock>> {
        let Some(side) = &self.side else {
            return Ok(None);
        };
        let mut conn = side.locks.acquire().await?;
        sqlx::query("SELECT pg_advisory_lock(1, hashtext($1))")
            .bind(session_id)
            .execute(&mut *conn)
            .await?;
        Ok(Some(SessionLock {
            conn: Some(conn),
            key: session_id.to_string(),
        }))
    }

    /// The pool `LISTEN` connections come from (PostgreSQL): apart from the main pool.
    pub fn listen_pool(&self) -> Option<&sqlx::PgPool> {
        self.side.as_ref().map(|s| &s.listen)
    }

    /// Appends a batch to the shared log (ids assigned by the database, in commit order)
    /// and wakes every instance's follower. Answers the ids given, in the batch's order.
    pub async fn append_shared_events(
        &self,
        batch: &[(String, &'static str, String)],
    ) -> Result<Vec<i64>> {
        let Pool::Postgres(pool) = &self.pool else {
            return Ok(Vec::new());
        };
        let mut ids = Vec::with_capacity(batch.len());
        let mut tx = pool.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock(2, 0)")
            .execute(&mut *tx)
            .await?;
        for chunk in batch.chunks(500) {
            let mut qb = sqlx::QueryBuilder::new("INSERT INTO events (session_id, name, data) ");
            qb.push_values(chunk, |mut b, (session, name, data)| {
                b.push_bind(session).push_bind(*name).push_bind(data);
            });
            // The ids come from the sequence row by row, so sorted they are the batch's order.
            qb.push(" RETURNING id");
            let mut got: Vec<i64> = qb.build_query_scalar().fetch_all(&mut *tx).await?;
            got.sort_unstable();
            ids.extend(got);
        }
        sqlx::query("SELECT pg_notify($1, '')")
            .bind(EVENTS_CHANNEL)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(ids)
    }

    /// Logged events of every session after `after`, in order (at most `limit`).
    pub async fn events_after(&self, after: i64, limit: i64) -> Result<Vec<LoggedEvent>> {
        let Pool::Postgres(pool) = &self.pool else {
            return Ok(Vec::new());
        };
        let rows = sqlx::query(
            "SELECT id, session_id, name, data FROM events WHERE id > $1 ORDER BY id LIMIT $2",
        )
        .bind(after)
        .bind(limit)
        .fetch_all(pool)
        .await?;
        Ok(rows
            .iter()
            .filter_map(|r| super::events::logged_event(r, r.get("session_id")))
            .collect())
    }

    /// Records that `instance` is alive now (on the heartbeat's own connection).
    pub async fn heartbeat(&self, instance: &str) -> Result<()> {
        let Some(side) = &self.side else {
            return Ok(());
        };
        let pool = &side.beat;
        sqlx::query(
            "INSERT INTO instances (id, seen_at) VALUES ($1, $2)
             ON CONFLICT (id) DO UPDATE SET seen_at = excluded.seen_at",
        )
        .bind(instance)
        .bind(now_ms())
        .execute(pool)
        .await?;
        Ok(())
    }

    /// Forgets an instance that stops cleanly.
    pub async fn retire(&self, instance: &str) -> Result<()> {
        let Pool::Postgres(pool) = &self.pool else {
            return Ok(());
        };
        sqlx::query("DELETE FROM instances WHERE id = $1")
            .bind(instance)
            .execute(pool)
            .await?;
        Ok(())
    }

    /// Running runs whose executing instance has not been seen for `lease_ms` (or is gone).
    pub async fn orphaned_runs(&self, lease_ms: i64) -> Result<Vec<Run>> {
        let Pool::Postgres(pool) = &self.pool else {
            return Ok(Vec::new());
        };
        let rows = sqlx::query(
            "SELECT r.* FROM runs r LEFT JOIN instances i ON i.id = r.owner
             WHERE r.status = 'running' AND (i.id IS NULL OR i.seen_at < $1)
             ORDER BY r.seq",
        )
        .bind(now_ms() - lease_ms)
        .fetch_all(pool)
        .await?;
        Ok(rows.iter().map(rows::run).collect())
    }

    /// Asks the instance executing a run to stop it: a flag it polls and a notification.
    pub async fn request_cancel(&self, run_id: &str) -> Result<()> {
        let Pool::Postgres(pool) = &self.pool else {
            return Ok(());
        };
        let mut tx = pool.begin().await?;
        sqlx::query("UPDATE runs SET cancel_requested = TRUE WHERE id = $1")
            .bind(run_id)
            .execute(&mut *tx)
            .await?;
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(CANCEL_CHANNEL)
            .bind(run_id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Running runs of `owner` that someone asked to stop.
    pub async fn cancels_requested(&self, owner: &str) -> Result<Vec<String>> {
        let Pool::Postgres(pool) = &self.pool else {
            return Ok(Vec::new());
        };
        Ok(sqlx::query_scalar(
            "SELECT id FROM runs WHERE owner = $1 AND status = 'running' AND cancel_requested",
        )
        .bind(owner)
        .fetch_all(pool)
        .await?)
    }
}
