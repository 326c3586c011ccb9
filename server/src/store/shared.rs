//! What several instances on one PostgreSQL database need from the store: the ordered event
//! log they all follow, heartbeats (the leases on the runs each executes) and cancel
//! requests; the cross-instance session lock is in `session_lock`. On SQLite (one instance)
//! these are no-ops or empty.
use super::{rows, LoggedEvent, Pool, Store};
use super::{Result, StoreError};
use app::wire::Run;
use app::wire::RunId;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use std::time::Duration;

/// Notification channel: new events are in the log.
pub const EVENTS_CHANNEL: &str = "mulligan_events";
/// Notification channel: a run was asked to stop (payload: its id).
pub const CANCEL_CHANNEL: &str = "mulligan_cancel";
/// `LISTEN` connections an instance keeps: the event follower's and the cancel listener's.
const LISTENERS: u32 = 2;
/// Connections an instance opens besides its main pool: the heartbeat's, the event log
/// writer's and the listeners'.
pub const SIDE_CONNECTIONS: u32 = 2 + LISTENERS;
/// The database's clock, in ms since the Unix epoch: leases and locks are judged by it, so
/// hosts whose clocks disagree never take each other for dead.
pub(crate) const DB_NOW_MS: &str = "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT";
/// Event rows of any session (`id`, `session_id`, `name`, `data`), unknown names skipped.
fn logged_events(rows: &[sqlx::postgres::PgRow]) -> Vec<LoggedEvent> {
    rows.iter()
        .filter_map(|r| super::events::logged_event(r, super::rows::Get::id(r, "session_id")))
        .collect()
}

/// How long an instance may go unseen (by the database's clock) before its running runs
/// count as orphans and its writes of their progress are refused.
pub const LEASE_MS: i64 = 5000;

/// SQL that holds while the lease a run was started under is live: its owner's epoch is
/// still the one the run recorded (no instance took the owner's runs over since) and the
/// owner was seen within [`LEASE_MS`] by the database's clock. `run` names the `runs` row.
pub(super) fn lease_live(run: &str) -> String {
    format!(
        "EXISTS (SELECT 1 FROM instances i WHERE i.id = {run}.owner
             AND i.epoch = COALESCE({run}.owner_epoch, 0)
             AND i.seen_at >= {DB_NOW_MS} - {LEASE_MS})"
    )
}

/// A row (`1`) while run `$1` is `running` under a live lease (instance and epoch), locking
/// the run's row until the transaction ends: the fence of a write of the run's progress.
pub(super) fn fence_sql() -> String {
    format!(
        "SELECT 1::BIGINT FROM runs r WHERE r.id = $1 AND r.status = 'running' AND {}
         FOR SHARE OF r",
        lease_live("r")
    )
}

/// A heartbeat that takes longer than this is abandoned and its connection closed (a hung
/// connection is replaced by a fresh one on the next beat).
const BEAT_TIMEOUT: Duration = Duration::from_secs(2);
/// Connections kept apart from the main pool, so that no load on it can starve them:
/// - `beat`: one connection for heartbeats, so a busy pool never lets this instance's
///   lease lapse (and another instance declare it dead).
/// - `events`: one connection for the event log's writer, so that a delta's way to other
///   instances never queues behind a burst of run starts for the main pool (its batches
///   are written one at a time anyway).
/// - `listen`: the `LISTEN` connections (events, cancels), which a listener keeps for its
///   whole life and would otherwise take from the main pool.
///
/// Session locks take no connection of their own: they are rows ([`Store::lock_session`]).
pub(super) struct SidePools {
    beat: PgPool,
    events: PgPool,
    listen: PgPool,
}

impl SidePools {
    pub(super) fn connect(opts: &PgConnectOptions) -> SidePools {
        SidePools {
            beat: PgPoolOptions::new()
                .max_connections(1)
                .acquire_timeout(BEAT_TIMEOUT)
                .connect_lazy_with(opts.clone()),
            events: PgPoolOptions::new()
                .max_connections(1)
                .acquire_timeout(Duration::from_secs(30))
                .connect_lazy_with(opts.clone()),
            listen: PgPoolOptions::new()
                .max_connections(LISTENERS)
                .acquire_timeout(Duration::from_secs(10))
                .connect_lazy_with(opts.clone()),
        }
    }

    pub(super) async fn close(&self) {
        self.beat.close().await;
        self.events.close().await;
        self.listen.close().await;
    }
}

impl Store {
    /// The pool `LISTEN` connections come from (PostgreSQL): apart from the main pool.
    pub fn listen_pool(&self) -> Option<&sqlx::PgPool> {
        self.side.as_ref().map(|s| &s.listen)
    }

    /// Numbers a batch of events (ids from the log's sequence, in commit order) and sends it
    /// to every instance's follower in `NOTIFY` payloads; only what a resume needs is written
    /// as rows: every event but deltas, and a delta too large for a notification. A delta
    /// thus costs no row: followers keep recent deltas in memory, and the reply's text is
    /// saved with its `delta_seq` (a resume from the log gets that snapshot). Answers the ids
    /// given, in the batch's order. On the writer's own connection.
    pub async fn append_shared_events(
        &self,
        batch: &[(String, &'static str, String)],
    ) -> Result<Vec<i64>> {
        let Some(side) = &self.side else {
            return Ok(Vec::new());
        };
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        let (rows, payloads) = super::notify::encode(batch);
        let n = i64::try_from(batch.len()).unwrap_or(i64::MAX);
        let (mut places, mut sessions, mut names, mut datas) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (k, (session, name, data)) in rows {
            places.push(k);
            sessions.push(session.as_str());
            names.push(*name);
            datas.push(data.as_str());
        }
        // One statement, so one trip and its own transaction: one writer at a time across
        // instances (the lock, held until the statement commits), so ids, commits and
        // notifications all come in one order. Under the lock the batch's ids are one run of
        // the sequence from `base`; each payload gets `b<base>` in front as it is sent.
        let base: i64 = sqlx::query_scalar(
            "WITH locked AS MATERIALIZED (SELECT pg_advisory_xact_lock(2, 0)),
                  taken AS MATERIALIZED (
                    SELECT nextval(pg_get_serial_sequence('events', 'id')) AS base FROM locked),
                  moved AS MATERIALIZED (
                    SELECT setval(pg_get_serial_sequence('events', 'id'), base + $1 - 1)
                    FROM taken),
                  written AS (
                    INSERT INTO events (id, session_id, name, data)
                    SELECT taken.base + r.k, r.s, r.n, r.d
                    FROM taken, unnest($2::INT8[], $3::TEXT[], $4::TEXT[], $5::TEXT[])
                         AS r(k, s, n, d)),
                  sent AS MATERIALIZED (
                    SELECT pg_notify($6, 'b' || taken.base || E'\n' || p)
                    FROM taken, unnest($7::TEXT[]) AS p)
             SELECT taken.base FROM taken, moved, (SELECT count(*) FROM sent) AS c",
        )
        .bind(n)
        .bind(&places)
        .bind(&sessions)
        .bind(&names)
        .bind(&datas)
        .bind(EVENTS_CHANNEL)
        .bind(&payloads)
        .fetch_one(&side.events)
        .await?;
        Ok((0..n).map(|k| base.saturating_add(k)).collect())
    }

    /// The logged events with these ids, in id order.
    pub async fn events_by_id(&self, ids: &[i64]) -> Result<Vec<LoggedEvent>> {
        let Pool::Postgres(pool) = &self.pool else {
            return Ok(Vec::new());
        };
        let rows = sqlx::query(
            "SELECT id, session_id, name, data FROM events WHERE id = ANY($1) ORDER BY id",
        )
        .bind(ids)
        .fetch_all(pool)
        .await?;
        Ok(logged_events(&rows))
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
        Ok(logged_events(&rows))
    }

    /// Records that `instance` is alive now, by the database's clock, on the heartbeat's own
    /// connection. A beat that hangs past `BEAT_TIMEOUT` fails and closes its connection,
    /// so the next beat goes out on a fresh one.
    pub async fn heartbeat(&self, instance: &str) -> Result<()> {
        let Some(side) = &self.side else {
            return Ok(());
        };
        let too_slow = || StoreError::internal("a heartbeat got no answer within 2 s");
        let mut conn = tokio::time::timeout(BEAT_TIMEOUT, side.beat.acquire())
            .await
            .map_err(|_| too_slow())??;
        let sql = format!(
            "INSERT INTO instances (id, seen_at) VALUES ($1, {DB_NOW_MS})
             ON CONFLICT (id) DO UPDATE SET seen_at = excluded.seen_at"
        );
        let beat = sqlx::query(&sql).bind(instance).execute(&mut *conn);
        match tokio::time::timeout(BEAT_TIMEOUT, beat).await {
            Ok(done) => {
                done?;
                Ok(())
            }
            Err(_) => {
                // Out of the pool and closed: a connection stuck mid-statement is not reused.
                drop(conn.detach());
                Err(too_slow())
            }
        }
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

    /// Running runs whose lease is no longer live: their instance has not been seen for
    /// [`LEASE_MS`], is gone, or had its runs taken over (its epoch moved on).
    pub async fn orphaned_runs(&self) -> Result<Vec<Run>> {
        let Pool::Postgres(pool) = &self.pool else {
            return Ok(Vec::new());
        };
        let rows = sqlx::query(&format!(
            "SELECT r.* FROM runs r WHERE r.status = 'running' AND NOT {} ORDER BY r.seq",
            lease_live("r")
        ))
        .fetch_all(pool)
        .await?;
        Ok(rows.iter().map(rows::run).collect())
    }

    /// Whether run `run_id` is still `running` as `owner`'s, under the epoch it was started
    /// with: its lease may have lapsed for a while, but no one took it over (always true on
    /// SQLite, where nothing fences).
    pub async fn still_owned(&self, run_id: &RunId, owner: &str) -> Result<bool> {
        let Pool::Postgres(pool) = &self.pool else {
            return Ok(true);
        };
        let row: Option<i64> = sqlx::query_scalar(
            "SELECT 1::BIGINT FROM runs r JOIN instances i ON i.id = r.owner
             WHERE r.id = $1 AND r.owner = $2 AND r.status = 'running'
               AND i.epoch = COALESCE(r.owner_epoch, 0)",
        )
        .bind(run_id.as_str())
        .bind(owner)
        .fetch_optional(pool)
        .await?;
        Ok(row.is_some())
    }

    /// Running runs `owner` executes under its current lease epoch: a run it started under
    /// an epoch that was taken over since is not among them (it must stop it).
    pub async fn leased_runs_of(&self, owner: &str) -> Result<Vec<Run>> {
        let Pool::Postgres(pool) = &self.pool else {
            return self.running_runs_of(owner).await;
        };
        let rows = sqlx::query(
            "SELECT r.* FROM runs r JOIN instances i ON i.id = r.owner
             WHERE r.owner = $1 AND r.status = 'running' AND i.epoch = COALESCE(r.owner_epoch, 0)
             ORDER BY r.seq",
        )
        .bind(owner)
        .fetch_all(pool)
        .await?;
        Ok(rows.iter().map(rows::run).collect())
    }

    /// Asks the instance executing a run to stop it: a flag it polls and a notification.
    pub async fn request_cancel(&self, run_id: &RunId) -> Result<()> {
        let Pool::Postgres(pool) = &self.pool else {
            return Ok(());
        };
        let mut tx = pool.begin().await?;
        sqlx::query("UPDATE runs SET cancel_requested = TRUE WHERE id = $1")
            .bind(run_id.as_str())
            .execute(&mut *tx)
            .await?;
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(CANCEL_CHANNEL)
            .bind(run_id.as_str())
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Running runs of `owner` that someone asked to stop.
    pub async fn cancels_requested(&self, owner: &str) -> Result<Vec<RunId>> {
        let Pool::Postgres(pool) = &self.pool else {
            return Ok(Vec::new());
        };
        let ids: Vec<String> = sqlx::query_scalar(
            "SELECT id FROM runs WHERE owner = $1 AND status = 'running' AND cancel_requested",
        )
        .bind(owner)
        .fetch_all(pool)
        .await?;
        Ok(ids.into_iter().map(RunId::new).collect())
    }
}
