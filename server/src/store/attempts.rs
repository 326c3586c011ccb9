//! A run's Tier 1 attempts (`run_attempts` rows): each one's start, failure and wait.
use super::*;
use app::wire::RunId;

impl Store {
    pub async fn attempts(&self, run_id: &RunId) -> Result<Vec<Attempt>> {
        with_pool!(self, |pool| {
            let rows = sqlx::query("SELECT * FROM run_attempts WHERE run_id = $1 ORDER BY n")
                .bind(run_id.as_str())
                .fetch_all(pool)
                .await?;
            Ok(rows
                .iter()
                .map(|r| Attempt {
                    n: r.get::<i64, _>("n") as u32,
                    started_at: r.get("started_at"),
                    error: r.get("error"),
                    retry_in_ms: r.get("retry_in_ms"),
                    model: r.get("model"),
                })
                .collect())
        })
    }

    /// Tier 1 attempt `n` of a run started, opening model step `step` on `model` (`None`:
    /// the session's own; also recorded: the run's steps count on with its attempts, in the
    /// same write).
    pub async fn attempt_started(
        &self,
        run_id: &RunId,
        n: u32,
        step: u32,
        model: Option<&str>,
    ) -> Result<()> {
        with_writer!(self, |pool| {
            let mut tx = pool.begin().await?;
            sqlx::query(
                "INSERT INTO run_attempts (run_id, n, started_at, model) VALUES ($1, $2, $3, $4)
             ON CONFLICT (run_id, n) DO UPDATE
             SET started_at = excluded.started_at, error = NULL, retry_in_ms = NULL,
                 model = excluded.model",
            )
            .bind(run_id.as_str())
            .bind(n as i64)
            .bind(now_ms())
            .bind(model)
            .execute(&mut *tx)
            .await?;
            sqlx::query(
                "UPDATE runs SET tier1_attempts = $1,
                 steps = CASE WHEN steps < $3 THEN $3 ELSE steps END
             WHERE id = $2",
            )
            .bind(n as i64)
            .bind(run_id.as_str())
            .bind(i64::from(step))
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok(())
        })
    }

    /// Tier 1 attempt `n` of a run failed; `retry_in_ms` when another follows after that wait.
    pub async fn attempt_failed(
        &self,
        run_id: &RunId,
        n: u32,
        error: &str,
        retry_in_ms: Option<i64>,
    ) -> Result<()> {
        with_writer!(self, |pool| {
            sqlx::query(
                "UPDATE run_attempts SET error = $1, retry_in_ms = $2 WHERE run_id = $3 AND n = $4",
            )
            .bind(self.storable(error))
            .bind(retry_in_ms)
            .bind(run_id.as_str())
            .bind(n as i64)
            .execute(pool)
            .await?;
            Ok(())
        })
    }
}
