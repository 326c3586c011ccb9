//! A run's end, in one transaction: its status, its reply's final text, its tool calls'
//! end, the session's spend, the hold or release of the prompts queued behind it, and the
//! start of the session's next run; fenced by the run's lease on a shared database.
use super::runs::released_in_order;
use super::script::{Arg, Run as _, Script};
use super::starts::{self, Started};
use super::*;
use app::wire::RunId;
use app::wire::SessionId;
use std::sync::LazyLock;

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

/// A run's end, unless it ended already ($1 status, $2 error, $3 retryable, $4 class, $5 retry
/// after, $6 now, $7 tokens, $8 run).
const END_RUN: &str =
    "UPDATE runs SET status = $1, error_message = $2, retryable = $3, retry_class = $4,
         retry_after_until = $5, finished_at = $6, tokens_used = tokens_used + $7,
         served = COALESCE($9, served), stop_reason = COALESCE($10, stop_reason)
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
    /// With `awaiting_approval`: the calls of the step that asks, recorded as it parks.
    pub asked: Vec<super::AskedCall>,
    /// An agent's reason for ending a completed turn, when not simply done (CONTRACT §9).
    pub stop_reason: Option<String>,
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
        args.push(o.stop_reason.clone().into());
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
}
