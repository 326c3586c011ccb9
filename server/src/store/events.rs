//! The event log: appended in batches, read back for SSE resumes, pruned of deltas.
use super::*;
use app::wire::SessionId;

/// One event as logged: its id, session and pre-rendered name and JSON data.
#[derive(Clone, Debug)]
pub struct LoggedEvent {
    pub id: i64,
    pub session_id: SessionId,
    pub name: &'static str,
    pub data: String,
}

/// An event row (`id`, `name`, `data`) of `session_id`; `None` for an unknown name.
pub(super) fn logged_event(row: &impl Get, session_id: SessionId) -> Option<LoggedEvent> {
    Some(LoggedEvent {
        id: row.int("id"),
        session_id,
        name: static_event_name(&row.text("name"))?,
        data: row.text("data"),
    })
}

/// The name of the row that marks how far event ids are reserved ([`Store::reserve_event_ids`]):
/// no event's name, so no read of a session's events ever sees it.
const IDS_RESERVED: &str = "ids reserved";

fn static_event_name(name: &str) -> Option<&'static str> {
    app::wire::EVENT_NAMES.iter().copied().find(|n| *n == name)
}

impl Store {
    pub async fn max_event_id(&self) -> Result<i64> {
        with_pool!(self, |pool| {
            Ok(
                sqlx::query_scalar("SELECT COALESCE(MAX(id), 0) FROM events")
                    .fetch_one(pool)
                    .await?,
            )
        })
    }

    /// Reserves the event ids below `mark` (one instance): a row of the log at `mark`, of no
    /// session and no event name, so the log's highest id is above every id handed out and a
    /// restart, crash or not, numbers on after it. The earlier mark goes in the same
    /// transaction (its id may be handed out once this one is in).
    pub async fn reserve_event_ids(&self, mark: i64) -> Result<()> {
        with_writer!(self, |pool| {
            let mut tx = pool.begin().await?;
            sqlx::query(
                "INSERT INTO events (id, session_id, name, data) VALUES ($1, '', $2, '')
                 ON CONFLICT (id) DO NOTHING",
            )
            .bind(mark)
            .bind(IDS_RESERVED)
            .execute(&mut *tx)
            .await?;
            sqlx::query("DELETE FROM events WHERE session_id = '' AND name = $1 AND id < $2")
                .bind(IDS_RESERVED)
                .bind(mark)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(())
        })
    }

    /// Appends a batch of events atomically: one statement when the batch fits in one (no
    /// BEGIN and COMMIT round trips), else one transaction.
    pub async fn append_events(&self, batch: &[&LoggedEvent]) -> Result<()> {
        const ROWS: usize = 200;
        if batch.is_empty() {
            return Ok(());
        }
        with_writer!(self, |pool| {
            // Rows `from..` of the batch, at most `ROWS` of them (bound by reference: no copy).
            let insert = |from: usize| {
                let mut qb =
                    sqlx::QueryBuilder::new("INSERT INTO events (id, session_id, name, data) ");
                qb.push_values(batch.iter().skip(from).take(ROWS), |mut b, e| {
                    b.push_bind(e.id)
                        .push_bind(e.session_id.as_str())
                        .push_bind(e.name)
                        .push_bind(&e.data);
                });
                // An event written twice is the same row: a batch retried after a commit
                // that went through, or a kept delta spilled after its batch wrote it.
                qb.push(" ON CONFLICT (id) DO NOTHING");
                qb
            };
            if batch.len() <= ROWS {
                insert(0).build().execute(pool).await?;
                return Ok(());
            }
            let mut tx = pool.begin().await?;
            for from in (0..batch.len()).step_by(ROWS) {
                insert(from).build().execute(&mut *tx).await?;
            }
            tx.commit().await?;
            Ok(())
        })
    }

    /// Deletes the `delta` events of each session logged before the given id (a run's end:
    /// a session runs one run at a time, so every delta before it belongs to an ended run,
    /// whose reply and `message` events hold the text). Answers how many went. One session:
    /// one statement, no transaction around it.
    pub async fn prune_deltas(&self, ends: &[(String, i64)]) -> Result<u64> {
        const PRUNE: &str =
            "DELETE FROM events WHERE session_id = $1 AND id < $2 AND name = 'delta'";
        with_writer!(self, |pool| {
            if let [(session_id, end_id)] = ends {
                let done = sqlx::query(PRUNE)
                    .bind(session_id)
                    .bind(end_id)
                    .execute(pool)
                    .await?;
                return Ok(done.rows_affected());
            }
            let mut tx = pool.begin().await?;
            let mut n = 0;
            for (session_id, end_id) in ends {
                n += sqlx::query(PRUNE)
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

    /// The session's logged events with `after < id < before`, in order: the first `limit`
    /// of them (a caller reads a long range page by page, from the last id it got).
    pub async fn events_between(
        &self,
        session_id: &SessionId,
        after: i64,
        before: i64,
        limit: i64,
    ) -> Result<Vec<LoggedEvent>> {
        with_pool!(self, |pool| {
            let rows = sqlx::query(
                "SELECT id, name, data FROM events
                 WHERE session_id = $1 AND id > $2 AND id < $3 ORDER BY id LIMIT $4",
            )
            .bind(session_id.as_str())
            .bind(after)
            .bind(before)
            .bind(limit)
            .fetch_all(pool)
            .await?;
            Ok(rows
                .iter()
                .filter_map(|r| logged_event(r, session_id.clone()))
                .collect())
        })
    }
}
