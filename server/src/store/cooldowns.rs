//! Provider cooldowns in the database: every instance sharing it holds the same keys, and a
//! restart keeps them. One indexed lookup per provider request, never per delta. A storage
//! error never blocks a request (the provider answers for itself then).
use super::{with_pool, with_writer, Pool, Store};
use crate::retry::cooldown::{reason_of, Key, Table, Wait};
use app::wire::{Cooldown, RetryClass};
use futures::future::BoxFuture;
use sqlx::Row;
use std::sync::atomic::Ordering::Relaxed;

impl Table for Store {
    fn note(&self, key: Key, until: i64, reason: RetryClass, _now: i64) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            if let Pool::Sqlite { cooldowns_end, .. } = &self.pool {
                // Before the write: a check from now on looks the key up.
                cooldowns_end.fetch_max(until, Relaxed);
            }
            // The later deadline wins (an ended one is always earlier).
            let done: Result<_, sqlx::Error> = with_writer!(self, |pool| {
                sqlx::query(
                    "INSERT INTO cooldowns (key, shown, until, reason) VALUES ($1, $2, $3, $4)
                     ON CONFLICT (key) DO UPDATE SET until = excluded.until, reason = excluded.reason
                     WHERE excluded.until > cooldowns.until",
                )
                .bind(key.id())
                .bind(key.shown())
                .bind(until)
                .bind(reason.as_str())
                .execute(pool)
                .await
                .map(|_| ())
            });
            if let Err(e) = done {
                tracing::warn!(error = %e, "could not record a provider cooldown");
            }
        })
    }

    fn check<'a>(&'a self, key: &'a Key, now: i64) -> BoxFuture<'a, Option<Wait>> {
        Box::pin(async move {
            // One instance on SQLite: when every cooldown it ever noted has ended, there is
            // nothing to look up (the common case: one read less before each provider call).
            if let Pool::Sqlite { cooldowns_end, .. } = &self.pool {
                if cooldowns_end.load(Relaxed) <= now {
                    return None;
                }
            }
            let row: Result<Option<(i64, String)>, sqlx::Error> = with_pool!(self, |pool| {
                sqlx::query_as("SELECT until, reason FROM cooldowns WHERE key = $1 AND until > $2")
                    .bind(key.id())
                    .bind(now)
                    .fetch_optional(pool)
                    .await
            });
            match row {
                Ok(found) => found.map(|(until, reason)| Wait {
                    until,
                    reason: reason_of(&reason),
                }),
                Err(e) => {
                    tracing::warn!(error = %e, "could not read provider cooldowns; sending anyway");
                    None
                }
            }
        })
    }

    fn list(&self, now: i64) -> BoxFuture<'_, Vec<Cooldown>> {
        Box::pin(async move {
            let rows: Result<Vec<Cooldown>, sqlx::Error> = with_pool!(self, |pool| {
                sqlx::query(
                    "SELECT shown, until, reason FROM cooldowns WHERE until > $1
                     ORDER BY until, shown",
                )
                .bind(now)
                .fetch_all(pool)
                .await
                .map(|rows| {
                    rows.iter()
                        .map(|r| Cooldown {
                            key: r.get("shown"),
                            until: r.get("until"),
                            reason: RetryClass::parse(&r.get::<String, _>("reason")),
                        })
                        .collect()
                })
            });
            rows.unwrap_or_else(|e| {
                tracing::warn!(error = %e, "could not list provider cooldowns");
                Vec::new()
            })
        })
    }

    fn clear<'a>(&'a self, shown: &'a str, now: i64) -> BoxFuture<'a, Option<Cooldown>> {
        Box::pin(async move {
            let row: Result<Option<(String, i64, String)>, sqlx::Error> =
                with_writer!(self, |pool| {
                    sqlx::query_as(
                        "DELETE FROM cooldowns WHERE shown = $1 AND until > $2
                     RETURNING shown, until, reason",
                    )
                    .bind(shown)
                    .bind(now)
                    .fetch_optional(pool)
                    .await
                });
            match row {
                Ok(found) => found.map(|(key, until, reason)| Cooldown {
                    key,
                    until,
                    reason: RetryClass::parse(&reason),
                }),
                Err(e) => {
                    tracing::warn!(error = %e, "could not clear a provider cooldown");
                    None
                }
            }
        })
    }
}
