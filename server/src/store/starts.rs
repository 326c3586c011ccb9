//! Starting a run: the statements that take a session's next queued run to `running` (inside
//! a dispatch's or a run end's transaction, or on their own), and what a start answers.
use super::*;

/// A run the store just started: `running`, its empty streaming reply, and what its provider
/// request needs of the session (read in the same statement).
#[derive(Debug)]
pub struct Started {
    pub run: Run,
    pub reply: Message,
    pub call: SessionCall,
}

/// Starts the session's next run inside transaction `$tx`, when no run of the session is
/// running and an unheld run is queued: the run becomes `running` with an empty streaming
/// reply, and its first Tier 1 attempt starts (the provider is called next; the runner
/// records the later ones). Three statements: the reply is inserted from the chosen run's row,
/// so choosing it is no separate read, and the run's row comes back with its session's model,
/// spend and tools. Evaluates to an `Option<Started>` (errors return from the enclosing
/// function).
macro_rules! start_next_in {
    ($tx:ident, $session_id:expr, $owner:expr, $now:expr) => {{
        let now: i64 = $now;
        let reply = sqlx::query(&format!(
            "INSERT INTO messages (id, session_id, seq, role, content, created_at, run_id, status, provenance)
             SELECT $1, r.session_id,
                    (SELECT COALESCE(MAX(seq), 0) + 1 FROM messages WHERE session_id = $2),
                    'agent', '', $3, r.id, 'streaming', r.provenance
             FROM runs r
             WHERE r.id = (SELECT id FROM runs
                           WHERE session_id = $2 AND status = 'queued' AND held_by IS NULL
                             AND NOT EXISTS (SELECT 1 FROM runs WHERE session_id = $2 AND status = 'running')
                           ORDER BY seq LIMIT 1)
             RETURNING {NEW_MESSAGE}"
        ))
        .bind(new_id("m"))
        .bind($session_id)
        .bind(now)
        .fetch_optional(&mut *$tx)
        .await?;
        match reply.as_ref().map(rows::message) {
            None => None,
            Some(reply) => {
                let run_id = reply
                    .run_id
                    .clone()
                    .ok_or_else(|| Error::internal("a started reply has no run"))?;
                sqlx::query(
                    "INSERT INTO run_attempts (run_id, n, started_at) VALUES ($1, 1, $2)
                     ON CONFLICT (run_id, n) DO UPDATE
                     SET started_at = excluded.started_at, error = NULL, retry_in_ms = NULL",
                )
                .bind(&run_id)
                .bind(now)
                .execute(&mut *$tx)
                .await?;
                let run = sqlx::query(
                    "UPDATE runs SET status = 'running', started_at = $1, reply_message_id = $2, owner = $3,
                         tier1_attempts = 1, steps = 1
                     WHERE id = $4
                     RETURNING *,
                         (SELECT model FROM sessions s WHERE s.id = runs.session_id) AS session_model,
                         (SELECT tokens_used FROM sessions s WHERE s.id = runs.session_id) AS session_tokens_used,
                         (SELECT tools FROM sessions s WHERE s.id = runs.session_id) AS session_tools",
                )
                .bind(now)
                .bind(&reply.id)
                .bind($owner)
                .bind(&run_id)
                .fetch_one(&mut *$tx)
                .await?;
                Some(Started {
                    run: rows::run(&run),
                    reply,
                    call: rows::session_call(&run),
                })
            }
        }
    }};
}

pub(super) use start_next_in;

impl Store {
    /// In one transaction: starts the session's next run (see [`start_next_in!`]) unless one
    /// is running or none waits. `owner` is the instance that executes it (its heartbeat is
    /// the run's lease).
    pub async fn start_next(&self, session_id: &str, owner: &str) -> Result<Option<Started>> {
        with_writer!(self, |pool| {
            let mut tx = pool.begin().await?;
            let started = start_next_in!(tx, session_id, owner, now_ms());
            tx.commit().await?;
            Ok(started)
        })
    }
}
