//! Starting a run: the statements that take a session's next queued run to `running` (inside
//! a dispatch's or a run end's transaction, or on their own), and what a start answers.
use super::script::{Run as _, Script};
use super::*;
use app::wire::SessionId;

/// A run the store just started: `running`, its empty streaming reply, and what its provider
/// request needs of the session (read in the same statement).
#[derive(Debug)]
pub struct Started {
    pub run: Run,
    pub reply: Message,
    pub call: SessionCall,
    /// A run resumed after its tool calls were decided (CONTRACT §8): the milliseconds it
    /// executed before (waiting is not run time). `None` for a run's first start.
    pub resumed: Option<i64>,
}

/// The streaming reply of the session's next startable run: the first queued, unheld run,
/// when none is running ($1 reply id, $2 session, $3 now). Choosing the run is part of the
/// insert, so it is no separate read.
const START_REPLY: &str = "INSERT INTO messages (id, session_id, seq, role, content, created_at, run_id, status, provenance)
     SELECT $1, r.session_id,
            (SELECT COALESCE(MAX(seq), 0) + 1 FROM messages WHERE session_id = $2),
            'agent', '', $3, r.id, 'streaming', r.provenance
     FROM runs r
     WHERE r.id = (SELECT id FROM runs
                   WHERE session_id = $2 AND status = 'queued' AND held_by IS NULL
                     AND NOT EXISTS (SELECT 1 FROM runs WHERE session_id = $2
                                     AND status IN ('running', 'awaiting_approval'))
                   ORDER BY seq LIMIT 1)
     RETURNING *, FALSE AS superseded";

/// The first Tier 1 attempt of the run whose reply is $1, at $2 (nothing without the reply).
const START_ATTEMPT: &str = "INSERT INTO run_attempts (run_id, n, started_at)
     SELECT run_id, 1, CAST($2 AS BIGINT) FROM messages WHERE id = $1
     ON CONFLICT (run_id, n) DO UPDATE
     SET started_at = excluded.started_at, error = NULL, retry_in_ms = NULL";

/// What a started run's row carries of its session, for its provider requests
/// ([`rows::session_call`] reads them): appended to a `RETURNING *, ` of `runs`.
macro_rules! session_call_columns {
    () => {
        "(SELECT model FROM sessions s WHERE s.id = runs.session_id) AS session_model,
         (SELECT tokens_used FROM sessions s WHERE s.id = runs.session_id) AS session_tokens_used,
         (SELECT tools FROM sessions s WHERE s.id = runs.session_id) AS session_tools,
         (SELECT fallbacks FROM sessions s WHERE s.id = runs.session_id) AS session_fallbacks,
         (SELECT approval FROM sessions s WHERE s.id = runs.session_id) AS session_approval,
         (SELECT tool_grants FROM sessions s WHERE s.id = runs.session_id) AS session_tool_grants"
    };
}
pub(super) use session_call_columns;

/// The run whose reply is $2 becomes `running` at $1, executed by instance $3 under its
/// current lease epoch; it comes back with its session's model, spend and tools.
const START_RUN: &str = concat!(
    "UPDATE runs SET status = 'running', started_at = $1, reply_message_id = $2, owner = $3,
         owner_epoch = COALESCE((SELECT epoch FROM instances WHERE id = $3), 0),
         tier1_attempts = 1, steps = 1
     WHERE id = (SELECT run_id FROM messages WHERE id = $2)
     RETURNING *, ",
    session_call_columns!()
);

/// Where a start's statements are in a [`Script`].
pub(super) struct Start {
    reply: usize,
    run: usize,
}

/// Adds the start of the session's next run to `script`: when no run of the session is
/// running and an unheld run is queued, the run becomes `running` with an empty streaming
/// reply, and its first Tier 1 attempt starts (the provider is called next; the run's task
/// records the later ones). Three statements, all keyed by the reply's id, chosen here; the
/// run comes back with its session's model, spend and tools. A dispatch, a run's end and
/// [`Store::start_next`] each add them to their own transaction's script.
pub(super) fn push_start(
    script: &mut Script,
    session_id: &SessionId,
    owner: &str,
    now: i64,
) -> Start {
    let reply_id = new_id("m");
    let reply = script.push(
        START_REPLY,
        vec![
            reply_id.as_str().into(),
            session_id.as_str().into(),
            now.into(),
        ],
    );
    script.push(START_ATTEMPT, vec![reply_id.as_str().into(), now.into()]);
    let run = script.push(
        START_RUN,
        vec![now.into(), reply_id.as_str().into(), owner.into()],
    );
    Start { reply, run }
}

impl Start {
    /// The run the script started, if one was free to start.
    pub(super) fn read<R: rows::Get>(&self, rows: &[Vec<R>]) -> Option<Started> {
        let reply = rows.get(self.reply)?.first()?;
        let run = rows.get(self.run)?.first()?;
        Some(Started {
            run: rows::run(run),
            reply: rows::message(reply),
            call: rows::session_call(run),
            resumed: None,
        })
    }
}

impl Store {
    /// In one transaction: starts the session's next run (see `push_start`) unless one
    /// is running or none waits. `owner` is the instance that executes it (its heartbeat is
    /// the run's lease).
    pub async fn start_next(&self, session_id: &SessionId, owner: &str) -> Result<Option<Started>> {
        let mut script = Script::default();
        let start = push_start(&mut script, session_id, owner, now_ms());
        with_writer!(self, |pool| {
            let mut tx = pool.begin().await?;
            let rows = (&mut *tx).run(script).await?;
            let started = start.read(&rows);
            tx.commit().await?;
            Ok(started)
        })
    }
}
