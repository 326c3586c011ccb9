//! Runs' lifecycle writes: dispatch (queue, supersede), end, holds and their release, the
//! dismissal of a failed run's retry; the start is in `starts`, the reads in `run_reads`.
use super::script::{Arg, Run as _, Script};
use super::starts::{self, Started};
use super::*;
use app::wire::RunId;
use app::wire::SessionId;
use app::wire::{MessageId, PromptId};
use std::sync::LazyLock;

/// A run to queue: on a new operator message (a prompt, a continuation) or on an existing one.
pub struct NewRun<'a> {
    pub session_id: &'a SessionId,
    /// Let the prompts held behind an earlier failure go first (an operator's new prompt).
    pub release_held: bool,
    /// The content of a new operator message to anchor on.
    pub new_message: Option<&'a str>,
    pub message_provenance: Option<Provenance>,
    /// The existing anchor, when there is no new message.
    pub anchor_id: Option<&'a MessageId>,
    pub kind: RunKind,
    pub attempt: u32,
    pub provenance: Option<Provenance>,
    /// Supersede every visible message after the anchor (queued and held prompts excepted).
    pub supersede_after_anchor: bool,
}

impl<'a> NewRun<'a> {
    /// An operator's prompt: a new message, answered by its first run.
    pub fn prompt(session_id: &'a SessionId, content: &'a str) -> NewRun<'a> {
        NewRun {
            session_id,
            release_held: true,
            new_message: Some(content),
            message_provenance: None,
            anchor_id: None,
            kind: RunKind::Prompt,
            attempt: 1,
            provenance: None,
            supersede_after_anchor: false,
        }
    }
}

/// What [`Store::dispatch`] recorded.
#[derive(Debug)]
pub struct Dispatched {
    /// Prompts held behind an earlier failure that this dispatch let go (they run first).
    pub released: Vec<Run>,
    /// The new operator message, when the run came with one.
    pub message: Option<Message>,
    /// The queued run.
    pub run: Run,
    /// The ids of the messages it superseded.
    pub superseded: Vec<MessageId>,
    /// The run it started (maybe not the queued one).
    pub started: Option<Started>,
    /// Whether it ended the session's waiting background retry (a newer turn, or that
    /// retry itself, is on its way: the waiting one belonged to the turn before).
    pub waiting_retry_ended: bool,
}

/// What [`Store::end_run`] recorded.
#[derive(Debug)]
pub struct Finished {
    /// The ended run.
    pub run: Run,
    /// Its reply, final.
    pub reply: Option<Message>,
    /// After a completion: the prompts held behind an earlier failure, now free, in order.
    pub released: Vec<Run>,
    /// The session's next run, started in the same transaction.
    pub started: Option<Started>,
}

/// Lets every held prompt of session `$1` go on (`RETURNING` the runs, in no order).
/// An operator's prompt ($1 id, $2 session, $3 content, $4 now, $5 provenance).
const NEW_PROMPT: &str =
    "INSERT INTO messages (id, session_id, seq, role, content, created_at, provenance)
     VALUES ($1, $2, (SELECT COALESCE(MAX(seq), 0) + 1 FROM messages WHERE session_id = $2),
             'operator', $3, $4, $5)
     RETURNING *, FALSE AS superseded";

/// A queued run ($1 id, $2 session, $3 anchor, $4 kind, $5 attempt, $6 provenance, $7 now,
/// $8 prompt id, $9 provenance kind).
const NEW_RUN: &str = "INSERT INTO runs (id, session_id, seq, anchor_message_id, status, kind, attempt,
                       provenance, created_at, prompt_id, provenance_kind)
     VALUES ($1, $2, (SELECT COALESCE(MAX(seq), 0) + 1 FROM runs WHERE session_id = $2), $3, 'queued',
             $4, $5, $6, $7, $8, $9)
     RETURNING *";

/// Supersedes the messages after anchor $4 of session $3 by run $1 at $2 (queued and held
/// prompts excepted).
const SUPERSEDE_AFTER: &str = "INSERT INTO supersessions (message_id, by_run_id, at)
     SELECT m.id, $1, $2 FROM messages m
     WHERE m.session_id = $3 AND m.seq > (SELECT seq FROM messages WHERE id = $4)
       AND NOT EXISTS (SELECT 1 FROM supersessions x WHERE x.message_id = m.id)
       AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.anchor_message_id = m.id AND r.status = 'queued')
     RETURNING message_id";

/// A run's end, unless it ended already ($1 status, $2 error, $3 retryable, $4 class, $5 retry
/// after, $6 now, $7 tokens, $8 run).
const END_RUN: &str =
    "UPDATE runs SET status = $1, error_message = $2, retryable = $3, retry_class = $4,
         retry_after_until = $5, finished_at = $6, tokens_used = tokens_used + $7,
         served = COALESCE($9, served)
     WHERE id = $8 AND status IN ('queued', 'running', 'awaiting_approval')
     RETURNING *";

/// Who records a run's end, which decides what the end's statement checks on a shared
/// database (on SQLite, one instance, nothing more than `END_RUN`'s own check).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndBy {
    /// The instance executing the run: only while the lease it started the run under is
    /// live (fencing: an instance that lost it writes nothing).
    Owner,
    /// Another instance ending a run whose lease lapsed: only while it is still lapsed,
    /// and the owner's epoch moves on with it, so nothing the owner started under that
    /// lease can write again.
    Takeover,
    /// Whoever holds the session's lock with no one executing the run (a queued run's
    /// cancel, a run this instance recorded but has no task for, a restart on SQLite).
    Settled,
}

/// [`END_RUN`] for the owner of a run on a shared database.
static END_RUN_OWNER: LazyLock<String> = LazyLock::new(|| {
    END_RUN.replace(
        "AND status IN ('queued', 'running', 'awaiting_approval')",
        &format!("AND status = 'running' AND {}", shared::lease_live("runs")),
    )
});
/// [`END_RUN`] for a takeover on a shared database.
static END_RUN_TAKEOVER: LazyLock<String> = LazyLock::new(|| {
    END_RUN.replace(
        "AND status IN ('queued', 'running', 'awaiting_approval')",
        &format!(
            "AND status = 'running' AND NOT {}",
            shared::lease_live("runs")
        ),
    )
});
/// A takeover moves the lapsed owner of run $1 to its next epoch (nothing when the owner
/// is gone or alive).
static REVOKE_LEASE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "UPDATE instances SET epoch = epoch + 1
         WHERE id = (SELECT owner FROM runs WHERE id = $1)
           AND seen_at < {} - {}",
        shared::DB_NOW_MS,
        shared::LEASE_MS
    )
});

/// The final text and status of run $7's reply ($1 text, $2 status, $3 error, $4 retryable,
/// $5 class, $6 retry after).
const END_REPLY: &str = "UPDATE messages SET content = $1, status = $2, error_message = $3, retryable = $4,
         retry_class = $5, retry_after_until = $6
     WHERE id = (SELECT reply_message_id FROM runs WHERE id = $7)
     RETURNING *, EXISTS (SELECT 1 FROM supersessions x WHERE x.message_id = messages.id) AS superseded";

/// Run $3's calls still running end as $1 at $2.
const END_TOOL_CALLS: &str = "UPDATE tool_calls SET status = $1, finished_at = $2
     WHERE run_id = $3 AND status = 'running'";

/// Run $2's calls recorded but never sent end `cancelled` at $1.
const END_UNSENT_CALLS: &str = "UPDATE tool_calls SET status = 'cancelled', finished_at = $1,
         result = COALESCE(result, 'This tool call was not run: its turn ended before it was sent.')
     WHERE run_id = $2 AND status IN ('awaiting_approval', 'queued')";

/// Run $2's tokens ($1) count to its session's spend.
const ADD_SPEND: &str = "UPDATE sessions SET tokens_used = tokens_used + $1
     WHERE id = (SELECT session_id FROM runs WHERE id = $2)";

/// Holds the prompts queued in failed run $1's session behind it.
const HOLD_BEHIND: &str = "UPDATE runs SET held_by = $1
     WHERE session_id = (SELECT session_id FROM runs WHERE id = $1)
       AND status = 'queued' AND held_by IS NULL";

/// Lets go the prompts held in run $1's session.
const RELEASE_HELD_OF_RUN: &str = "UPDATE runs SET held_by = NULL
     WHERE session_id = (SELECT session_id FROM runs WHERE id = $1)
       AND status = 'queued' AND held_by IS NOT NULL
     RETURNING *";

const RELEASE_HELD: &str = "UPDATE runs SET held_by = NULL
     WHERE session_id = $1 AND status = 'queued' AND held_by IS NOT NULL
     RETURNING *";

/// Released runs' rows in the order they were queued.
fn released_in_order<R: rows::Get>(rows: &[R]) -> Vec<Run> {
    let mut released: Vec<(i64, Run)> = rows.iter().map(|r| (r.int("seq"), rows::run(r))).collect();
    released.sort_by_key(|(seq, _)| *seq);
    released.into_iter().map(|(_, r)| r).collect()
}

/// How a run ended.
pub struct Outcome {
    pub status: RunStatus,
    pub content: String,
    pub error_message: Option<String>,
    pub retry: Option<RetryClassification>,
    pub tokens_used: i64,
    /// Whether the run may have tool calls recorded (false: their end needs no write).
    pub tool_calls_recorded: bool,
    /// Which model answered each step (empty: leave what is recorded).
    pub served: Vec<app::wire::Served>,
}

/// A foreign-key violation on a row of `session_id` is its session missing (the one key such
/// an insert refers to that no caller has checked); anything else is the database failing.
fn missing_session(e: sqlx::Error, session_id: &SessionId) -> StoreError {
    match StoreError::from(e) {
        e if e.constraint() == Some(Constraint::ForeignKey) => {
            StoreError::not_found("session", session_id)
        }
        e => e,
    }
}

fn retry_columns(r: &Option<RetryClassification>) -> (Option<bool>, Option<&str>, Option<i64>) {
    match r {
        Some(r) => (
            Some(r.retryable),
            Some(r.retry_class.as_str()),
            r.retry_after_until,
        ),
        None => (None, None, None),
    }
}

impl Store {
    /// Records that a run's conversation was compacted after a context overflow.
    pub async fn mark_compacted(&self, run_id: &RunId) -> Result<()> {
        with_writer!(self, |pool| {
            sqlx::query("UPDATE runs SET compacted = TRUE WHERE id = $1")
                .bind(run_id.as_str())
                .execute(pool)
                .await?;
            Ok(())
        })
    }

    /// In one transaction: an optional new operator message, the supersession of what follows
    /// the anchor (queued and held prompts excepted), a queued run and the end of the
    /// session's waiting background retry (so a retry that fires is no longer waiting, and
    /// a failed write leaves it waiting); with `start` (this
    /// instance's id), also the start of the session's next run when none is running (the new
    /// one, or a prompt queued before it), so a run on a free session starts in the
    /// transaction that queued it. A session that does not exist is `not_found`. The statements
    /// go as one `Script`: on SQLite one trip to the connection's thread.
    pub async fn dispatch(&self, d: NewRun<'_>, start: Option<&str>) -> Result<Dispatched> {
        let now = now_ms();
        let mut script = Script::default();
        let release = d
            .release_held
            .then(|| script.push(RELEASE_HELD, vec![d.session_id.into()]));
        let message_id = new_id("m");
        let message = d.new_message.map(|content| {
            script.push(
                NEW_PROMPT,
                vec![
                    message_id.as_str().into(),
                    d.session_id.into(),
                    content.into(),
                    now.into(),
                    rows::provenance_json(&d.message_provenance).into(),
                ],
            )
        });
        let anchor_id = match (message, d.anchor_id) {
            (Some(_), _) => message_id.clone(),
            (None, Some(id)) => id.to_string(),
            (None, None) => return Err(StoreError::internal("a dispatch needs an anchor")),
        };
        let run_id = new_id("r");
        let queued = script.push(
            NEW_RUN,
            vec![
                run_id.as_str().into(),
                d.session_id.into(),
                anchor_id.as_str().into(),
                d.kind.as_str().into(),
                i64::from(d.attempt).into(),
                rows::provenance_json(&d.provenance).into(),
                now.into(),
                d.provenance
                    .as_ref()
                    .and_then(|p| p.prompt_id.as_ref().map(PromptId::as_str))
                    .into(),
                d.provenance.as_ref().map(|p| p.kind.as_str()).into(),
            ],
        );
        let supersede = d.supersede_after_anchor.then(|| {
            script.push(
                SUPERSEDE_AFTER,
                vec![
                    run_id.as_str().into(),
                    now.into(),
                    d.session_id.into(),
                    anchor_id.as_str().into(),
                ],
            )
        });
        let waiting = script.push(sessions::END_WAITING_RETRY, vec![d.session_id.into()]);
        let start = start.map(|owner| starts::push_start(&mut script, d.session_id, owner, now));
        with_writer!(self, |pool| {
            let mut tx = pool.begin().await?;
            // The prompt's insert is the first to need the session: a missing one fails its key.
            let rows = (&mut *tx).run(script).await.map_err(|e| match message {
                Some(_) => missing_session(e, d.session_id),
                None => e.into(),
            })?;
            let first = |i: usize| rows.get(i).and_then(|r| r.first());
            let run = first(queued)
                .map(rows::run)
                .ok_or_else(|| StoreError::internal("a queued run came back empty"))?;
            let dispatched = Dispatched {
                released: release
                    .and_then(|i| rows.get(i))
                    .map_or_else(Vec::new, |r| released_in_order(r)),
                message: message.and_then(first).map(rows::message),
                run,
                superseded: supersede
                    .and_then(|i| rows.get(i))
                    .map_or_else(Vec::new, |r| r.iter().map(|r| r.id("message_id")).collect()),
                started: start.and_then(|s| s.read(&rows)),
                waiting_retry_ended: first(waiting).is_some(),
            };
            tx.commit().await?;
            Ok(dispatched)
        })
    }

    /// [`Store::end_run`] starting nothing: the ended run and its reply.
    pub async fn finish_run(
        &self,
        run_id: &RunId,
        o: &Outcome,
        by: EndBy,
    ) -> Result<Option<(Run, Option<Message>)>> {
        Ok(self
            .end_run(run_id, o, by, None)
            .await?
            .map(|f| (f.run, f.reply)))
    }

    /// In one transaction: the run's end, its reply's final text and status, the session's
    /// spend; after a failure the hold on the prompts queued behind it, after a completion the
    /// release of the prompts held behind an earlier failure; and with `start` (this instance's
    /// id) the start of the session's next run. A run that already ended is left alone
    /// (returns `None`, nothing starts).
    pub async fn end_run(
        &self,
        run_id: &RunId,
        o: &Outcome,
        by: EndBy,
        start: Option<(&SessionId, &str)>,
    ) -> Result<Option<Finished>> {
        let now = now_ms();
        let (retryable, class, until) = retry_columns(&o.retry);
        let msg_status = match o.status {
            RunStatus::Completed => MessageStatus::Complete,
            RunStatus::Cancelled => MessageStatus::Cancelled,
            _ => MessageStatus::Failed,
        };
        let retry_args = || -> Vec<Arg> { vec![retryable.into(), class.into(), until.into()] };
        let mut script = Script::default();
        let mut args = vec![o.status.as_str().into(), o.error_message.clone().into()];
        args.extend(retry_args());
        args.extend([now.into(), o.tokens_used.into(), run_id.into()]);
        let served = (!o.served.is_empty())
            .then(|| serde_json::to_string(&o.served).ok())
            .flatten();
        args.push(served.into());
        let end_sql: &'static str = match (self.is_shared(), by) {
            (true, EndBy::Owner) => &END_RUN_OWNER,
            (true, EndBy::Takeover) => &END_RUN_TAKEOVER,
            _ => END_RUN,
        };
        let ended = script.push(end_sql, args);
        if self.is_shared() && by == EndBy::Takeover {
            script.push(&REVOKE_LEASE, vec![run_id.into()]);
        }
        let mut args = vec![o.content.as_str().into(), msg_status.as_str().into()];
        args.push(o.error_message.clone().into());
        args.extend(retry_args());
        args.push(run_id.into());
        let reply = script.push(END_REPLY, args);
        // A call still running when its run ends never got its result: cancelled with the
        // run, else its outcome is unknown.
        if o.tool_calls_recorded {
            let status = if o.status == RunStatus::Cancelled {
                "cancelled"
            } else {
                "interrupted"
            };
            script.push(
                END_TOOL_CALLS,
                vec![status.into(), now.into(), run_id.into()],
            );
            // Calls that waited (for a decision, or for their step's other calls) never ran.
            script.push(END_UNSENT_CALLS, vec![now.into(), run_id.into()]);
        }
        script.push(ADD_SPEND, vec![o.tokens_used.into(), run_id.into()]);
        // Prompts queued behind a failed turn are held in the same step, so no reader sees
        // the failure with them still free to start; a turn that completes lets them go.
        let released = match o.status {
            RunStatus::Failed => {
                script.push(HOLD_BEHIND, vec![run_id.into()]);
                None
            }
            RunStatus::Completed => Some(script.push(RELEASE_HELD_OF_RUN, vec![run_id.into()])),
            _ => None,
        };
        let started = start
            .map(|(session_id, owner)| starts::push_start(&mut script, session_id, owner, now));
        with_writer!(self, |pool| {
            let mut tx = pool.begin().await?;
            let rows = (&mut *tx).run(script).await?;
            let first = |i: usize| rows.get(i).and_then(|r| r.first());
            // A run that already ended is left alone: nothing of the script stays.
            let Some(run) = first(ended).map(rows::run) else {
                tx.rollback().await?;
                return Ok(None);
            };
            let finished = Finished {
                run,
                reply: first(reply).map(rows::message),
                released: released
                    .and_then(|i| rows.get(i))
                    .map_or_else(Vec::new, |r| released_in_order(r)),
                started: started.and_then(|s| s.read(&rows)),
            };
            tx.commit().await?;
            Ok(Some(finished))
        })
    }

    /// Records the operator's cancel of Tier 2 on a failed run (the first time wins; a repeat
    /// answers the run as it is). `None` when the run is not `failed`.
    pub async fn dismiss_retry(&self, run_id: &RunId) -> Result<Option<Run>> {
        with_writer!(self, |pool| {
            let row = sqlx::query(
                "UPDATE runs SET retry_dismissed_at = COALESCE(retry_dismissed_at, $1)
             WHERE id = $2 AND status = 'failed'
             RETURNING *",
            )
            .bind(now_ms())
            .bind(run_id.as_str())
            .fetch_optional(pool)
            .await?;
            Ok(row.as_ref().map(rows::run))
        })
    }

    /// Lets every held prompt of the session go on; answers the released runs, in order.
    pub async fn release_held(&self, session_id: &SessionId) -> Result<Vec<Run>> {
        with_writer!(self, |pool| {
            let rows = sqlx::query(RELEASE_HELD)
                .bind(session_id.as_str())
                .fetch_all(pool)
                .await?;
            Ok(released_in_order(&rows))
        })
    }
}
