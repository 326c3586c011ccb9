//! Runs' lifecycle writes: dispatch (queue, supersede), the release of held prompts, the
//! dismissal of a failed run's retry; the start is in `starts`, the end in `ends`, the reads
//! in `run_reads`.
use super::script::{Run as _, Script};
use super::starts::{self, Started};
use super::*;
use app::wire::RunId;
use app::wire::SessionId;
use app::wire::{MessageId, PromptId};

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

const RELEASE_HELD: &str = "UPDATE runs SET held_by = NULL
     WHERE session_id = $1 AND status = 'queued' AND held_by IS NOT NULL
     RETURNING *";

/// Released runs' rows in the order they were queued.
pub(super) fn released_in_order<R: rows::Get>(rows: &[R]) -> Vec<Run> {
    let mut released: Vec<(i64, Run)> = rows.iter().map(|r| (r.int("seq"), rows::run(r))).collect();
    released.sort_by_key(|(seq, _)| *seq);
    released.into_iter().map(|(_, r)| r).collect()
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
