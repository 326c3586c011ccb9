//! Model outages (`model_outages` rows) and the sessions parked behind them: each change of
//! an outage is a compare-and-set on its version, so instances racing for one probe or one
//! release slot cannot both win.
use super::rows::Get;
use super::StoreError;
use super::{with_pool, with_writer, Pool, Result, Store};
use crate::retry::parking::Outage;
use app::wire::{RetryClass, SessionId};

/// How many times a change is tried again after another instance changed the row first:
/// each lost try means another instance's change landed, so this only runs out when
/// something writes the row in a loop.
const CAS_TRIES: u32 = 64;

fn outage_of(row: &impl Get) -> (Outage, i64) {
    (
        Outage {
            model: row.text("model"),
            class: RetryClass::parse(&row.text("class")),
            since: row.int("since"),
            failures: u32::try_from(row.int("failures")).unwrap_or(u32::MAX),
            next_probe_at: row.int("next_probe_at"),
            probe_session: row.opt_text("probe_session"),
            releasing: row.int("releasing") != 0,
            release_next: row.int("release_next"),
        },
        row.int("version"),
    )
}

impl Store {
    /// The model's outage, if one is kept.
    pub async fn outage(&self, model: &str) -> Result<Option<Outage>> {
        Ok(self.outage_row(model).await?.map(|(o, _)| o))
    }

    /// How many waiting retries are parked behind `model`, `except` aside.
    pub async fn parked_count(&self, model: &str, except: &SessionId) -> Result<u32> {
        with_writer!(self, |pool| {
            let n: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM sessions
                 WHERE parked_on = $1 AND retry_fires_at IS NOT NULL AND id <> $2",
            )
            .bind(model)
            .bind(except.as_str())
            .fetch_one(pool)
            .await?;
            Ok(u32::try_from(n).unwrap_or(u32::MAX))
        })
    }

    /// The model's outage, with its version.
    async fn outage_row(&self, model: &str) -> Result<Option<(Outage, i64)>> {
        with_writer!(self, |pool| {
            let row = sqlx::query("SELECT * FROM model_outages WHERE model = $1")
                .bind(model)
                .fetch_optional(pool)
                .await?;
            Ok(row.as_ref().map(outage_of))
        })
    }

    /// Changes the model's outage by `change` (`None` after it: the outage ends), as one
    /// compare-and-set, read again and `change` applied again to what another instance
    /// wrote first. Answers the outage as written and what `change` said with it; an error
    /// (nothing written) when every try lost.
    pub async fn change_outage<T>(
        &self,
        model: &str,
        change: impl Fn(Option<Outage>) -> (Option<Outage>, T),
    ) -> Result<(Option<Outage>, T)> {
        let mut tries = 0;
        loop {
            tries += 1;
            let current = self.outage_row(model).await?;
            let (current, version) = current.unzip();
            let (next, said) = change(current.clone());
            let written = match (&next, version) {
                // Nothing changed (a look that found nothing to do): no write.
                (None, None) => true,
                _ if next == current => true,
                (None, Some(v)) => self.delete_outage(model, v).await?,
                (Some(o), None) => self.insert_outage(o).await?,
                (Some(o), Some(v)) => self.update_outage(o, v).await?,
            };
            if written {
                return Ok((next, said));
            }
            if tries >= CAS_TRIES {
                return Err(StoreError::internal(format!(
                    "the outage of {model} kept changing under this instance ({tries} tries)"
                )));
            }
        }
    }

    async fn insert_outage(&self, o: &Outage) -> Result<bool> {
        with_writer!(self, |pool| {
            let done = sqlx::query(
                "INSERT INTO model_outages
                     (model, since, failures, next_probe_at, probe_session, releasing, release_next, class, version)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 0)
                 ON CONFLICT (model) DO NOTHING",
            )
            .bind(&o.model)
            .bind(o.since)
            .bind(i64::from(o.failures))
            .bind(o.next_probe_at)
            .bind(o.probe_session.as_deref())
            .bind(i64::from(o.releasing))
            .bind(o.release_next)
            .bind(o.class.as_str())
            .execute(pool)
            .await?;
            Ok(done.rows_affected() == 1)
        })
    }

    async fn update_outage(&self, o: &Outage, version: i64) -> Result<bool> {
        with_writer!(self, |pool| {
            let done = sqlx::query(
                "UPDATE model_outages SET since = $2, failures = $3, next_probe_at = $4,
                     probe_session = $5, releasing = $6, release_next = $7, class = $9,
                     version = version + 1
                 WHERE model = $1 AND version = $8",
            )
            .bind(&o.model)
            .bind(o.since)
            .bind(i64::from(o.failures))
            .bind(o.next_probe_at)
            .bind(o.probe_session.as_deref())
            .bind(i64::from(o.releasing))
            .bind(o.release_next)
            .bind(version)
            .bind(o.class.as_str())
            .execute(pool)
            .await?;
            Ok(done.rows_affected() == 1)
        })
    }

    async fn delete_outage(&self, model: &str, version: i64) -> Result<bool> {
        with_writer!(self, |pool| {
            let done = sqlx::query("DELETE FROM model_outages WHERE model = $1 AND version = $2")
                .bind(model)
                .bind(version)
                .execute(pool)
                .await?;
            Ok(done.rows_affected() == 1)
        })
    }

    /// Every outage with how many waiting retries are parked behind it.
    pub async fn outages(&self) -> Result<Vec<(Outage, u32)>> {
        with_pool!(self, |pool| {
            let rows = sqlx::query(
                "SELECT o.*, (SELECT COUNT(*) FROM sessions s
                              WHERE s.parked_on = o.model AND s.retry_fires_at IS NOT NULL) AS waiting
                 FROM model_outages o ORDER BY o.model",
            )
            .fetch_all(pool)
            .await?;
            Ok(rows
                .iter()
                .map(|r| {
                    let waiting = u32::try_from(r.int("waiting")).unwrap_or(u32::MAX);
                    (outage_of(r).0, waiting)
                })
                .collect())
        })
    }

    /// Parks the session's waiting retry behind `model` (`None`: not parked).
    pub async fn park(&self, session_id: &SessionId, model: Option<&str>) -> Result<()> {
        with_writer!(self, |pool| {
            sqlx::query("UPDATE sessions SET parked_on = $1 WHERE id = $2")
                .bind(model)
                .bind(session_id.as_str())
                .execute(pool)
                .await?;
            Ok(())
        })
    }

    /// The waiting retries parked behind `model` (but `except`'s) are next looked at `at`:
    /// the outage's next probe (held), or now (released). Answers the sessions whose time moved, to announce.
    pub async fn reschedule_parked(
        &self,
        model: &str,
        at: i64,
        except: Option<&str>,
    ) -> Result<Vec<SessionId>> {
        with_writer!(self, |pool| {
            let ids: Vec<String> = sqlx::query_scalar(
                "UPDATE sessions SET retry_fires_at = $1
                 WHERE parked_on = $2 AND retry_fires_at IS NOT NULL AND retry_fires_at <> $1
                   AND ($3 IS NULL OR id <> $3)
                 RETURNING id",
            )
            .bind(at)
            .bind(model)
            .bind(except)
            .fetch_all(pool)
            .await?;
            Ok(ids.into_iter().map(SessionId::new).collect())
        })
    }
}
