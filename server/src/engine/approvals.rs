//! Approval before a tool acts (CONTRACT §8), the engine's side: a run parked while its
//! calls wait (it leaves this instance: no task, no connection), the operator's decision
//! recorded once under the session's lock, the run resumed here by the last decision, the
//! waits that time out, and a waiting run cancelled.
use super::{Engine, LOOP_LOCK_WAIT};
use crate::approval::declined_text;
use crate::error::Refusal;
use crate::error::{Error, Kind, Result};
use crate::store::{Decided, EndBy, NewDecision, NewToolCall, NotDecided, Outcome, RecordedCall};
use app::wire::{
    Approvals, DecidedBy, Decision, Event, Run, RunId, RunStatus, SessionId, ToolCall,
    ToolCallEvent, ToolCallId, MAX_DECISION_REASON_CHARS,
};
use std::time::Duration;

/// The most waiting calls `GET /approvals` answers (oldest first).
pub const MAX_APPROVALS_LISTED: u64 = 1000;
/// A page of `GET /approvals` when the client names no `limit` (as `GET /sessions`).
pub const DEFAULT_APPROVALS_PAGE: u64 = 100;

/// Approval waits' own state: how long a tool call waits for the operator's decision.
pub(super) struct Waits {
    timeout: Duration,
}

impl Waits {
    pub fn new(timeout: Duration) -> Waits {
        Waits { timeout }
    }

    /// How often the approvals loop looks: a quarter of the timeout, within 0.1 s to 5 s.
    fn sweep_every(&self) -> Duration {
        (self.timeout / 4).clamp(Duration::from_millis(100), Duration::from_secs(5))
    }

    /// The oldest a wait asked at `now` (ms) may be before it times out.
    fn cutoff(&self, now: i64) -> i64 {
        let timeout = i64::try_from(self.timeout.as_millis()).unwrap_or(i64::MAX);
        now.saturating_sub(timeout)
    }
}

/// A decision as the operator gave it.
pub struct Deciding {
    pub decision: Decision,
    pub reason: Option<String>,
    pub by: Option<DecidedBy>,
    pub from: Option<String>,
}

impl Engine {
    /// Records that a run's calls wait for the operator: the calls its step asked for and
    /// the run `awaiting_approval` with its text so far, in one transaction; the run leaves
    /// this instance. A cancel that reached the run first (it is set under the session's
    /// lock, which this takes) wins: the run ends `cancelled`, its calls `cancelled`.
    /// Answers whether the session's next run was looked for (always: a waiting run is the
    /// session's active run, and a cancelled one started the next itself).
    pub(super) async fn record_park(&self, run: &Run, outcome: &Outcome) -> Result<bool> {
        let session_id = &run.session_id;
        let _guard = self.locks().lock(session_id).await?;
        let reply_id = run
            .reply_message_id
            .clone()
            .ok_or_else(|| Error::internal("a run waiting for approval without a reply"))?;
        let calls: Vec<NewToolCall> = outcome
            .asked
            .iter()
            .map(|a| NewToolCall {
                run_id: &run.id,
                message_id: &reply_id,
                session_id,
                ord: a.ord,
                provider_id: &a.provider_id,
                call: &a.call,
                text_offset: a.text_offset,
            })
            .collect();
        let parked = self
            .store()
            .park_run(
                &run.id,
                &calls,
                &outcome.content,
                outcome.tokens_used,
                &outcome.served,
            )
            .await?;
        let Some((run, reply)) = parked else {
            tracing::info!(run_id = %run.id, "the run ended before it could wait for approval");
            return Ok(true);
        };
        let cancelled = self
            .runs()
            .get(&run.id)
            .is_some_and(|a| a.cancel.is_cancelled());
        if cancelled {
            self.cancel_waiting_run(&run).await?;
            return Ok(true);
        }
        for a in &outcome.asked {
            self.publish(
                session_id,
                Event::ToolCall(ToolCallEvent {
                    run_id: run.id.clone(),
                    message_id: reply_id.clone(),
                    call: a.call.clone(),
                }),
            );
        }
        if let Some(mut reply) = reply {
            if let Err(e) = self.store().with_parts_of(&mut reply).await {
                tracing::warn!(run_id = %run.id, error = %e, "could not read a reply's tool calls");
            }
            self.publish(session_id, Event::Message(reply));
        }
        self.publish(session_id, Event::Run(run));
        self.publish_session(session_id).await?;
        Ok(true)
    }

    /// The operator's decision on call `call_id` of run `run_id` (CONTRACT §8): recorded
    /// once; when it is the run's last question, the run resumes here. Answers the call as
    /// decided; `approval.decided` when it was decided already, `approval.not_waiting` when
    /// it waits for none, `not_found` for another run's call.
    pub async fn decide(
        &self,
        run_id: &RunId,
        call_id: &ToolCallId,
        deciding: Deciding,
    ) -> Result<ToolCall> {
        if deciding.decision == Decision::TimedOut {
            return Err(Error::invalid(
                "`decision` is one of allow_once, allow_always, reject_once, reject_always; \
                 timed_out is Mulligan's own",
            ));
        }
        let reason = deciding
            .reason
            .as_deref()
            .map(str::trim)
            .filter(|r| !r.is_empty());
        if let Some(r) = reason {
            let n = r.chars().count();
            if n > MAX_DECISION_REASON_CHARS {
                return Err(Error::invalid(format!(
                    "`reason` has {n} characters; at most {MAX_DECISION_REASON_CHARS}"
                )));
            }
        }
        super::check_tab_id(deciding.from.as_deref())?;
        let deciding = Deciding {
            reason: reason.map(str::to_string),
            ..deciding
        };
        let engine = self.clone();
        let (run_id, call_id) = (run_id.clone(), call_id.clone());
        self.runs()
            .carry(async move { engine.decide_now(&run_id, &call_id, &deciding).await })
            .await
    }

    async fn decide_now(
        &self,
        run_id: &RunId,
        call_id: &ToolCallId,
        d: &Deciding,
    ) -> Result<ToolCall> {
        let run = self.store().run(run_id).await?;
        let call = self.store().tool_call(call_id).await?;
        // A run's calls are those of its reply.
        if run.reply_message_id.as_ref().map(|m| m.as_str()) != Some(call.message_id.as_str()) {
            return Err(Error::not_found(
                &format!("tool call in run {run_id} (it belongs to another run)"),
                call_id,
            ));
        }
        let _guard = self.locks().lock(&run.session_id).await?;
        let new = NewDecision {
            decision: d.decision,
            reason: d.reason.as_deref(),
            by: d.by,
            from: d.from.as_deref(),
            declined: declined_text(d.reason.as_deref(), d.decision == Decision::TimedOut),
        };
        let decided = self.store().decide(run_id, call_id, &new).await?;
        let Decided { call, session_id } = match decided {
            Ok(d) => d,
            Err(NotDecided::Decided(c)) => {
                let a = c.call.approval.as_ref();
                return Err(Refusal::ApprovalDecided {
                    call: call_id.clone(),
                    decision: a.and_then(|a| a.decision).unwrap_or(Decision::TimedOut),
                    by: a.and_then(|a| a.by),
                }
                .into());
            }
            Err(NotDecided::NotWaiting(c)) => {
                return Err(Refusal::ApprovalNotWaiting {
                    call: call_id.clone(),
                    status: c.call.status.as_str(),
                }
                .into())
            }
        };
        tracing::info!(
            session_id = %session_id, run_id = %run_id, call = %call_id,
            decision = %d.decision, by = ?d.by, "a tool call was decided"
        );
        // The decision is recorded: it is answered as recorded whatever fails from here. An
        // announcement that fails is caught up by the page's next read; a resume that fails
        // is the approvals loop's on its next pass (it resumes runs decided, not resumed).
        self.announce_call(&session_id, run_id, &call);
        // An agent's question waits in its running run, which reads the call again now.
        self.context().decided.notify_waiters();
        if call_is_grant(d.decision) {
            if let Err(e) = self.publish_session(&session_id).await {
                tracing::warn!(session_id = %session_id, error = %e, "could not announce the session's grants");
            }
        }
        // The run's last question decided: it resumes here (still under the lock). Stopping,
        // nothing starts here; the approvals loop of a running instance resumes it.
        if let Some(owner) = self.owner() {
            match self.store().resume_decided(run_id, owner).await {
                Ok(Some(started)) => {
                    tracing::info!(run_id = %run_id, "every call decided: the run resumes here");
                    self.launch_resumed(started).await;
                    if let Err(e) = self.publish_session(&session_id).await {
                        tracing::warn!(session_id = %session_id, error = %e, "could not announce the session");
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(run_id = %run_id, error = %e, "the decision is recorded but the run could not resume now; the approvals loop resumes it")
                }
            }
        }
        Ok(call.call)
    }

    fn announce_call(&self, session_id: &SessionId, run_id: &RunId, call: &RecordedCall) {
        self.publish(
            session_id,
            Event::ToolCall(ToolCallEvent {
                run_id: run_id.clone(),
                message_id: call.message_id.clone(),
                call: call.call.clone(),
            }),
        );
    }

    /// `GET /approvals`: the calls waiting, oldest first, `limit` of them (1 to
    /// [`MAX_APPROVALS_LISTED`], default [`DEFAULT_APPROVALS_PAGE`]) after call `before`
    /// (the last of the previous page).
    pub async fn approvals(
        &self,
        limit: Option<u64>,
        before: Option<&ToolCallId>,
    ) -> Result<Approvals> {
        let limit = match limit {
            None => DEFAULT_APPROVALS_PAGE,
            Some(n) if (1..=MAX_APPROVALS_LISTED).contains(&n) => n,
            Some(n) => {
                return Err(Error::invalid(format!(
                    "`limit` is {n}; use 1 to {MAX_APPROVALS_LISTED}"
                )))
            }
        };
        let asked = i64::try_from(limit).unwrap_or(i64::MAX).saturating_add(1);
        let mut approvals = self.store().waiting_calls(None, before, asked).await?;
        let more = approvals.len() > usize::try_from(limit).unwrap_or(usize::MAX);
        approvals.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
        let next_before = more
            .then(|| approvals.last().map(|w| w.call.id.clone()))
            .flatten();
        Ok(Approvals {
            approvals,
            next_before,
        })
    }

    /// Ends a run that waits for approval `cancelled` (its waiting calls `cancelled`, none
    /// executed) and starts the session's next queued run. Call under the session's lock.
    pub(super) async fn cancel_waiting_run(&self, run: &Run) -> Result<Run> {
        let ended = self.end_waiting_run(run).await?;
        self.pump(&ended.session_id).await?;
        Ok(ended)
    }

    /// [`Self::cancel_waiting_run`] without starting the next run: for a caller that queues
    /// one itself (Regenerate), whose queueing must still see the prompts queued behind the
    /// waiting run as queued, so it spares them (CONTRACT §3). Call under the session's lock.
    pub(super) async fn end_waiting_run(&self, run: &Run) -> Result<Run> {
        let content = match &run.reply_message_id {
            Some(id) => self.store().message(id).await?.content,
            None => String::new(),
        };
        let outcome = Outcome {
            status: RunStatus::Cancelled,
            content,
            error_message: None,
            retry: None,
            tokens_used: 0,
            tool_calls_recorded: true,
            served: Vec::new(),
            asked: Vec::new(),
            stop_reason: None,
        };
        let Some((ended, reply)) = self
            .store()
            .finish_run(&run.id, &outcome, EndBy::Settled)
            .await?
        else {
            return Err(Refusal::RunEnded {
                run: run.id.clone(),
            }
            .into());
        };
        let session_id = &ended.session_id;
        if let Some(mut reply) = reply {
            if let Err(e) = self.store().with_parts_of(&mut reply).await {
                tracing::warn!(run_id = %run.id, error = %e, "could not read a reply's tool calls");
            }
            self.publish(session_id, Event::Message(reply));
        }
        self.publish(session_id, Event::Run(ended.clone()));
        self.publish_session(session_id).await?;
        Ok(ended)
    }

    /// Starts the loop that ends waits past `MULLIGAN_APPROVAL_TIMEOUT_MS` (`timed_out`: a
    /// rejection the model is told of) and resumes runs decided but not resumed (a decision
    /// taken while its instance stopped).
    pub fn time_out_approvals_periodically(&self) {
        let every = self.approval_waits().sweep_every();
        self.every(every, "timing out approvals failed", |e| {
            Box::pin(async move { e.approvals_pass().await })
        });
    }

    /// One pass of the approvals loop.
    pub(super) async fn approvals_pass(&self) -> Result<()> {
        let cutoff = self.approval_waits().cutoff(crate::clock::now_ms());
        for w in self.store().waiting_calls(Some(cutoff), None, 100).await? {
            let deciding = Deciding {
                decision: Decision::TimedOut,
                reason: None,
                by: None,
                from: None,
            };
            match self.decide_now(&w.run_id, &w.call.id, &deciding).await {
                Ok(_) => {
                    tracing::info!(run_id = %w.run_id, call = %w.call.id, "a tool call's wait timed out")
                }
                Err(e) if matches!(e.kind, Kind::Refused(_)) => {}
                Err(e) => {
                    tracing::warn!(run_id = %w.run_id, error = %e, "could not time out a wait")
                }
            }
        }
        self.resume_decided().await
    }

    /// Resumes runs whose calls were all decided but which no instance resumed.
    pub(super) async fn resume_decided(&self) -> Result<()> {
        for (session_id, run_id) in self.store().decided_runs().await? {
            let Some(owner) = self.owner() else {
                return Ok(());
            };
            let _guard = match self.locks().lock_within(&session_id, LOOP_LOCK_WAIT).await {
                Ok(g) => g,
                Err(_) => continue,
            };
            if let Some(started) = self.store().resume_decided(&run_id, owner).await? {
                tracing::info!(run_id = %run_id, "a decided run resumes here");
                self.launch_resumed(started).await;
            }
        }
        Ok(())
    }
}

impl Engine {
    /// Launches a resumed run, its reply announced with its calls as they are now.
    async fn launch_resumed(&self, mut started: crate::store::Started) {
        if let Err(e) = self.store().with_parts_of(&mut started.reply).await {
            tracing::warn!(run_id = %started.run.id, error = %e, "could not read a reply's tool calls");
        }
        self.launch(started);
    }
}

fn call_is_grant(d: Decision) -> bool {
    matches!(d, Decision::AllowAlways | Decision::RejectAlways)
}
