//! Dispatch: the one path by which a run is queued — a posted prompt, Regenerate (and so
//! Tier 2) and retry-now. Each takes the session's lock, checks its precondition and queues
//! the run in one store transaction, then starts it if the session is free. The lock is what
//! makes `if_last_run` and the retry claim atomic: N concurrent calls see one winner.
use super::{validate_content, Engine};
use crate::error::Refusal;
use crate::error::{Error, Result};
use crate::metrics::metrics;
use crate::store::{Dispatched, NewRun};
use app::wire::SessionId;
use app::wire::{
    Event, Provenance, ProvenanceKind, Receipt, RetryReceipt, Role, RunId, RunKind, RunStatus,
};
use app::wire::{MessageId, PromptId};

/// What a regenerate asks for, beyond its anchor (see [`Engine::regenerate`]).
#[derive(Clone, Copy)]
struct Regenerating<'a> {
    if_last_run: Option<&'a RunId>,
    manual: bool,
    from: Option<&'a str>,
}

impl Engine {
    /// Queues a run and starts it if the session is free. Call under the session's lock.
    /// The same transaction ends the session's waiting background retry: a newer prompt,
    /// regenerate or retry supersedes it (a background retry firing is counted `fired` by
    /// its caller instead).
    async fn queue(&self, new: NewRun<'_>) -> Result<Receipt> {
        let session_id = new.session_id.clone();
        let fired = new
            .provenance
            .as_ref()
            .is_some_and(|p| p.kind == ProvenanceKind::AutoResume && p.manual == Some(false));
        let Dispatched {
            released,
            message,
            run,
            superseded,
            started,
            waiting_retry_ended,
        } = self.store().dispatch(new, self.owner()).await?;
        if waiting_retry_ended && !fired {
            tracing::info!(session_id = %session_id, run_id = %run.id, "a newer turn ended the waiting background retry");
            metrics().background_retry("superseded");
        }
        for run in released {
            self.publish(&session_id, Event::Run(run));
        }
        for id in &superseded {
            if let Ok(m) = self.store().message(id).await {
                self.publish(&session_id, Event::Message(m));
            }
        }
        let message_id = match message {
            Some(m) => {
                let id = m.id.clone();
                self.publish(&session_id, Event::Message(m));
                id
            }
            None => run.anchor_message_id.clone(),
        };
        self.publish(&session_id, Event::Run(run.clone()));
        let started = started.map(|s| self.launch(s));
        if waiting_retry_ended {
            if let Err(e) = self.publish_session(&session_id).await {
                tracing::warn!(session_id = %session_id, error = %e, "could not announce the session");
            }
        }
        Ok(Receipt {
            message_id,
            queued: started.as_ref() != Some(&run.id),
            run_id: run.id,
            superseded,
            tools_superseded: 0,
        })
    }

    /// Posts an operator message: releases prompts held behind a failed turn (they go first,
    /// in order), then queues this one behind them.
    pub async fn post_message(&self, session_id: &SessionId, content: &str) -> Result<Receipt> {
        let content = validate_content(content)?.to_string();
        let (engine, session_id) = (self.clone(), session_id.clone());
        self.runs()
            .carry(async move { engine.post(&session_id, &content).await })
            .await
    }

    async fn post(&self, session_id: &SessionId, content: &str) -> Result<Receipt> {
        // A missing session is found by the dispatch (its message refers to the session).
        let _guard = self.locks().lock(session_id).await?;
        self.queue(NewRun::prompt(session_id, content)).await
    }

    /// Supersedes everything after operator message `mid` (queued and held prompts excepted)
    /// and runs again from it; a superseded `mid` is `regenerate.stale`. With `if_last_run`,
    /// only while that run is still the anchor's latest and `failed` (else
    /// `regenerate.stale`), checked under the same lock as the queueing. `manual` (an operator's click on the reply they saw): the latest run may also
    /// be `completed` or `cancelled`, so two tabs regenerating one reply start one run.
    /// Counted where it happens: a regenerate with `if_last_run` and not `manual` is a Tier 2
    /// retry, and the ended runs whose replies it superseded are counted `superseded`. `from`
    /// (a browser tab's id) becomes the new run's `provenance.from`.
    pub async fn regenerate(
        &self,
        session_id: &SessionId,
        mid: &MessageId,
        if_last_run: Option<&RunId>,
        manual: bool,
        from: Option<&str>,
    ) -> Result<Receipt> {
        let engine = self.clone();
        let (session_id, mid) = (session_id.clone(), mid.clone());
        let if_last_run = if_last_run.cloned();
        let from = from.map(str::to_string);
        self.runs()
            .carry(async move {
                let asked = Regenerating {
                    if_last_run: if_last_run.as_ref(),
                    manual,
                    from: from.as_deref(),
                };
                engine.regenerate_counted(&session_id, &mid, asked).await
            })
            .await
    }

    async fn regenerate_counted(
        &self,
        session_id: &SessionId,
        mid: &MessageId,
        asked: Regenerating<'_>,
    ) -> Result<Receipt> {
        if asked.if_last_run.is_some() && !asked.manual {
            metrics().tier2_retry();
        }
        let mut receipt = self.regenerate_from(session_id, mid, asked).await?;
        receipt.tools_superseded = self.count_superseded_runs(&receipt.superseded).await;
        Ok(receipt)
    }

    /// Counts the ended runs whose replies are among the `superseded` messages; answers the
    /// tool calls those runs had executed.
    async fn count_superseded_runs(&self, superseded: &[MessageId]) -> u32 {
        let (mut runs, mut tools) = (0, 0u32);
        for id in superseded {
            let Ok(m) = self.store().message(id).await else {
                continue;
            };
            if let (Role::Agent, Some(run_id)) = (m.role, &m.run_id) {
                runs += 1;
                if let Ok(run) = self.store().run(run_id).await {
                    tools = tools.saturating_add(run.tools_executed);
                }
            }
        }
        metrics().runs_superseded(runs);
        tools
    }

    async fn regenerate_from(
        &self,
        session_id: &SessionId,
        mid: &MessageId,
        asked: Regenerating<'_>,
    ) -> Result<Receipt> {
        let Regenerating {
            if_last_run,
            manual,
            from,
        } = asked;
        let anchor = self.store().message(mid).await?;
        if anchor.session_id != *session_id {
            return Err(Error::not_found("message", mid));
        }
        if anchor.role != Role::Operator {
            return Err(Error::invalid(
                "only an operator message can be regenerated: pass the prompt's id",
            ));
        }
        let _guard = self.locks().lock(session_id).await?;
        // Read again under the lock: a regenerate of an earlier prompt may just have
        // superseded this one, and a model answering it would not see its own prompt.
        if self.store().message(mid).await?.superseded {
            return Err(Refusal::PromptSuperseded {
                message: mid.clone(),
            }
            .into());
        }
        let latest = self.store().latest_run_for(mid).await?;
        if let Some(expected) = if_last_run {
            let fresh = latest.as_ref().is_some_and(|r| {
                r.id == *expected
                    && match r.status {
                        RunStatus::Failed => true,
                        RunStatus::Completed | RunStatus::Cancelled => manual,
                        RunStatus::Queued | RunStatus::Running | RunStatus::AwaitingApproval => {
                            false
                        }
                    }
            });
            if !fresh {
                return Err(Refusal::NotLatestRun {
                    expected: expected.clone(),
                    latest: latest.map(|r| (r.id, r.status)),
                }
                .into());
            }
        }
        // Tier 2 over a turn whose tools ran continues it instead (CONTRACT §6): a retry never
        // runs a recorded tool call again. Only an operator's own Regenerate may.
        if !manual && if_last_run.is_some() && latest.as_ref().is_some_and(|r| r.tools_executed > 0)
        {
            return Ok(self.retry_queue(session_id, from, false).await?.1);
        }
        // A run waiting for approval holds no task to end: Regenerate supersedes it here
        // (ended `cancelled`, nothing of it executed), or its question would block the queue.
        // Nothing starts until the queueing below: the prompts queued behind the waiting run
        // must still be queued there, so they are spared, and the first of them starts.
        let waiting = self.store().runs(session_id).await?;
        if let Some(w) = waiting
            .iter()
            .find(|r| r.status == RunStatus::AwaitingApproval)
        {
            self.end_waiting_run(w).await?;
        }
        let prompt = PromptId::of_message(mid);
        let attempt = self.store().tries_of(&prompt).await?.saturating_add(1);
        self.queue(NewRun {
            session_id,
            release_held: false,
            new_message: None,
            message_provenance: None,
            anchor_id: Some(mid),
            kind: RunKind::Regenerate,
            attempt,
            provenance: Some(Provenance {
                kind: ProvenanceKind::Regenerate,
                prompt_id: Some(prompt),
                attempt: Some(attempt),
                manual: manual.then_some(true),
                from: from.map(str::to_string),
            }),
            supersede_after_anchor: true,
        })
        .await
    }

    /// Retries the session's failed last turn now: resends the prompt when the failed reply
    /// holds no model output, else keeps the partial reply and sends a continuation. The
    /// claim (the session still ends on a failed run, nothing runs or waits) and the queueing
    /// are one step under the session's lock.
    ///
    /// A background retry waiting in the session is taken over: this one goes now, and the
    /// waiting one ends (counted as superseded).
    /// Every answer, started or refused, is counted.
    pub async fn retry(&self, session_id: &SessionId, from: Option<&str>) -> Result<RetryReceipt> {
        let engine = self.clone();
        let (session_id, from) = (session_id.clone(), from.map(str::to_string));
        self.runs()
            .carry(async move {
                let answer = engine.retry_now(&session_id, from.as_deref()).await;
                metrics().retry_now_answered(&answer);
                answer
            })
            .await
    }

    async fn retry_now(&self, session_id: &SessionId, from: Option<&str>) -> Result<RetryReceipt> {
        self.store().session_exists(session_id).await?;
        let _guard = self.locks().lock(session_id).await?;
        self.retry_locked(session_id, from, true).await
    }

    /// Retry-now's claim and queueing, under the session's lock. `manual`: an operator or
    /// agent asked (else a background retry fired).
    pub(super) async fn retry_locked(
        &self,
        session_id: &SessionId,
        from: Option<&str>,
        manual: bool,
    ) -> Result<RetryReceipt> {
        Ok(self.retry_queue(session_id, from, manual).await?.0)
    }

    /// [`Self::retry_locked`], answering the queued run's receipt too.
    async fn retry_queue(
        &self,
        session_id: &SessionId,
        from: Option<&str>,
        manual: bool,
    ) -> Result<(RetryReceipt, Receipt)> {
        let store = self.store();
        if store.has_active_run(session_id).await? {
            return Err(Refusal::RetryBusy.into());
        }
        let failed = match store.last_turn(session_id).await? {
            Some(r) if r.status == RunStatus::Failed => r,
            Some(r) => return Err(Refusal::LastTurnNotFailed { status: r.status }.into()),
            None => return Err(Refusal::NoTurnToRetry.into()),
        };
        let anchor = store.message(&failed.anchor_message_id).await?;
        // The prompt this turn answers: a continuation's origin, else its anchor.
        let prompt_id = match &anchor.provenance {
            Some(p) if p.kind == ProvenanceKind::AutoResume => p
                .prompt_id
                .clone()
                .unwrap_or_else(|| PromptId::of_message(&anchor.id)),
            _ => PromptId::of_message(&anchor.id),
        };
        let n = store.resumes_of(&prompt_id).await?.saturating_add(1);
        let provenance = Provenance {
            kind: ProvenanceKind::AutoResume,
            prompt_id: Some(prompt_id.clone()),
            attempt: Some(n),
            manual: Some(manual),
            from: from.map(str::to_string),
        };
        // Resend only when the failed run streamed no text and executed no tool.
        let partial = failed.tools_executed > 0
            || match &failed.reply_message_id {
                Some(id) => !store.message(id).await?.content.is_empty(),
                None => false,
            };
        let why = failed
            .retry
            .as_ref()
            .map(|c| c.retry_class.as_str().replace('_', " "))
            .unwrap_or_else(|| "an error".into());
        let continuation = format!(
            "Your previous turn was cut off by {why}{}. Check what already finished before going on, then continue from where you stopped.",
            failed
                .error_message
                .as_deref()
                .map(crate::llm::limits::quoted_reason)
                .filter(|m| !m.is_empty())
                .map(|m| format!(" ({m})"))
                .unwrap_or_default()
        );
        let (kind, new) = if partial {
            (
                RunKind::Continuation,
                NewRun {
                    session_id,
                    release_held: false,
                    new_message: Some(&continuation),
                    message_provenance: Some(provenance.clone()),
                    anchor_id: None,
                    kind: RunKind::Continuation,
                    attempt: n + 1,
                    provenance: Some(provenance),
                    supersede_after_anchor: false,
                },
            )
        } else {
            (
                RunKind::Resend,
                NewRun {
                    session_id,
                    release_held: false,
                    new_message: None,
                    message_provenance: None,
                    anchor_id: Some(&failed.anchor_message_id),
                    kind: RunKind::Resend,
                    attempt: n + 1,
                    provenance: Some(provenance),
                    supersede_after_anchor: true,
                },
            )
        };
        let receipt = self.queue(new).await?;
        Ok((
            RetryReceipt {
                prompt_id: prompt_id.resume(n),
                run_id: receipt.run_id.clone(),
                kind,
            },
            receipt,
        ))
    }
}
