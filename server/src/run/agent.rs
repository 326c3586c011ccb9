//! A run on an ACP agent (CONTRACT §9): one `session/prompt` in the session's agent session,
//! its text relayed through the same windowed deltas and saver as a model step's, its
//! permissions decided in §8's order, the agent's stop reason as the run's end.
use super::relay::Step;
use super::{End, RunTask};
use crate::acp_client::TurnRequest;
use crate::approval::{self, Rule, SourceRule, Verdict};
use crate::clock::{new_id, now_ms};
use crate::llm::{limits, AgentAsk, AgentCall};
use crate::store::NewToolCall;
use crate::tools::bounded_result;
use app::wire::{
    Approval, Decision, Event, RetryClass, Role, RunKind, RunStatus, ToolAnnotations, ToolCall,
    ToolCallId, ToolCallStatus,
};
use std::time::Duration;

/// The most of the earlier conversation sent ahead of a prompt to a new agent session.
const MAX_HISTORY_BYTES: usize = 200_000;
/// The most characters of an agent's tool call title kept as its `tool`.
const MAX_TITLE_CHARS: usize = 200;
/// The most characters of an agent's id for a tool call kept.
const MAX_AGENT_CALL_ID: usize = 128;
/// How often a question waiting in a run reads its call again when no decision recorded
/// here woke it (one recorded by another instance).
const ASK_POLL: Duration = Duration::from_secs(1);

/// The agent's id for a call, as the run keys it.
fn agent_key(id: &str) -> String {
    id.chars().take(MAX_AGENT_CALL_ID).collect()
}

/// A run as its readers are shown it: `running` in the store while an agent's question
/// waits in it (the run's task holds the question), `awaiting_approval` to its readers, as
/// any run with a call waiting (CONTRACT §8).
pub fn shown<'a>(run: &mut app::wire::Run, calls: impl IntoIterator<Item = &'a ToolCall>) {
    if run.status == RunStatus::Running && calls.into_iter().any(undecided) {
        run.status = RunStatus::AwaitingApproval;
    }
}

/// Whether a recorded call waits for the operator still.
fn undecided(call: &ToolCall) -> bool {
    call.status == ToolCallStatus::AwaitingApproval
        && call.approval.as_ref().is_none_or(|a| a.decision.is_none())
}

impl RunTask {
    /// The agent the session's model names, if it names one.
    pub(super) fn agent_provider(&self) -> Option<String> {
        let model = self
            .ctx
            .models
            .catalogue()
            .resolve(&self.session.model)
            .ok()?;
        self.ctx
            .agents
            .has(&model.provider)
            .then_some(model.provider)
    }

    /// The turn on the agent `provider`: its prompt is the run's anchor (the operator's
    /// message, or a retry's continuation); a Regenerate from an earlier message than the
    /// agent last saw opens a new agent session, with the conversation before it sent ahead.
    pub(super) async fn agent_turn(&mut self, provider: String) -> End {
        if let Some(limit) = self.ctx.cfg.spend_limit_tokens {
            let spent = u64::try_from(self.session.tokens_used).unwrap_or(0);
            if spent >= limit {
                return End::Refused {
                    class: RetryClass::SpendLimitExceeded,
                    message: format!(
                        "this session has used {spent} tokens of its {limit}-token budget: raise MULLIGAN_SPEND_LIMIT_TOKENS or start a new session"
                    ),
                };
            }
        }
        let store = self.ctx.store.clone();
        let run = self.run.clone();
        let read = async {
            let history = store.history(&run.anchor_message_id).await?;
            let recorded = store.agent_session(&run.session_id, &provider).await?;
            crate::error::Result::Ok((history, recorded))
        };
        let (mut history, recorded) = match read.await {
            Ok(read) => read,
            Err(e) => {
                let e: crate::error::Error = e;
                return End::Refused {
                    class: RetryClass::ServerError,
                    message: limits::error_text(&e.to_string()),
                };
            }
        };
        let Some(prompt) = history.pop().filter(|m| m.role == Role::Operator) else {
            return End::Refused {
                class: RetryClass::InvalidRequest,
                message: "this turn has no operator message to send the agent".into(),
            };
        };
        let new_session = run.kind == RunKind::Regenerate
            && recorded
                .as_ref()
                .is_some_and(|r| r.last_message_id.as_deref() != Some(prompt.id.as_str()));
        let request = TurnRequest {
            provider: provider.clone(),
            session: run.session_id.to_string(),
            recorded: recorded.map(|r| r.agent_session),
            new_session,
            prompt: prompt.content.clone(),
            history: earlier(&history),
        };
        let opened = match self.ctx.agents.prompt(request).await {
            Ok(opened) => opened,
            Err(e) => {
                let reason = limits::error_text(&e.to_string());
                if let Err(e) = store.attempt_failed(&run.id, 1, &reason, None).await {
                    tracing::warn!(error = %e, "could not record an attempt");
                }
                return End::Failed(e);
            }
        };
        if let Err(e) = store
            .record_agent_session(
                &run.session_id,
                &provider,
                &opened.agent_session,
                &prompt.id,
            )
            .await
        {
            // Only a restart's `session/load` needs it: the turn goes on.
            tracing::warn!(error = %e, "could not record the agent session");
        }
        self.active.live().steps = 1;
        // An agent's own tools may run a long time without a word: the run's limit bounds it.
        let idle = self.ctx.cfg.max_run;
        match self.relay(opened.stream, Vec::new(), 1, idle).await {
            Step::Ended(end) => end,
            Step::Asked(_) => match opened.ending.stop_reason() {
                Some("cancelled") => End::Cancelled,
                Some("end_turn") | None => End::Completed,
                Some(other) => {
                    self.tally.agent_stop = Some(other.to_string());
                    End::Completed
                }
            },
        }
    }

    /// Records and shows a tool call the agent runs itself, as it starts or changes: the
    /// agent's tool calls are the run's (CONTRACT §9). A call the store cannot record ends
    /// the turn, as a model step's does.
    pub(super) async fn agent_call(&mut self, seen: AgentCall, step: u32) -> Result<(), End> {
        let key = agent_key(&seen.id);
        if !self.tally.agent_calls.contains_key(&key) {
            self.tally.calls = self.tally.calls.saturating_add(1);
            let call = ToolCall {
                id: ToolCallId::new(new_id("tc")),
                step,
                server: self.agent_provider().unwrap_or_else(|| "agent".into()),
                tool: title(seen.title.as_deref()),
                arguments: seen.input.clone().unwrap_or_else(|| serde_json::json!({})),
                status: ToolCallStatus::Running,
                result: None,
                started_at: now_ms(),
                finished_at: None,
                approval: None,
                annotations: None,
            };
            // The text before the call goes out first: its length is the call's offset.
            self.send_held(step);
            let text_offset = self.active.live().text.len();
            let new = NewToolCall {
                run_id: &self.run.id,
                message_id: &self.reply.id,
                session_id: &self.run.session_id,
                ord: self.tally.calls,
                provider_id: &key,
                call: &call,
                text_offset,
            };
            self.active.live().tool_calls += 1; // before: a failed write may still have landed
            self.ctx
                .store
                .tool_call_started(&new)
                .await
                .map_err(|e| unrecorded("start", e))?;
            self.announce_call(&call);
            self.tally.agent_calls.insert(key.clone(), call);
        }
        let Some(call) = self.tally.agent_calls.get_mut(&key) else {
            return Ok(());
        };
        if call.status != ToolCallStatus::Running {
            return Ok(()); // an update after its end changes nothing recorded
        }
        if let Some(t) = seen.title.as_deref() {
            call.tool = title(Some(t));
        }
        if let Some(input) = seen.input {
            call.arguments = input;
        }
        if let Some(out) = seen.output.as_deref() {
            call.result = Some(bounded_result(out));
        }
        let Some(ok) = seen.ended_ok else {
            return Ok(());
        };
        let mut call = call.clone();
        call.status = if ok {
            ToolCallStatus::Ok
        } else {
            ToolCallStatus::Error
        };
        self.end_agent_call(key, call).await
    }

    /// Records an agent call's end (at now, as `call` says it ended) and shows it.
    async fn end_agent_call(&mut self, key: String, mut call: ToolCall) -> Result<(), End> {
        call.finished_at = Some(now_ms());
        self.ctx
            .store
            .tool_call_ended(&call, &self.run.id, false)
            .await
            .map_err(|e| unrecorded("end", e))?;
        self.announce_call(&call);
        self.tally.agent_calls.insert(key, call);
        Ok(())
    }

    /// The agent asks before running a call (`session/request_permission`): §8's order
    /// decides (a reject grant denies, `ask_all` asks, `trust` or an allow grant runs; else
    /// the agent's asking means ask), and a call that asks waits here, recorded
    /// `awaiting_approval` and decided on any surface, while the agent holds its question.
    /// The agent is answered with the decision.
    pub(super) async fn agent_ask(&mut self, ask: AgentAsk, step: u32) -> Result<(), End> {
        self.agent_call(ask.call.clone(), step).await?;
        let key = agent_key(&ask.call.id);
        let Some(call) = self.tally.agent_calls.get(&key).cloned() else {
            ask.answer(Decision::RejectOnce);
            return Ok(());
        };
        if call.status != ToolCallStatus::Running {
            ask.answer(Decision::RejectOnce); // it ended: nothing is left to allow
            return Ok(());
        }
        let (mode, grants) = match self.ctx.store.approval_settings(&self.run.session_id).await {
            Ok(settings) => settings,
            Err(e) => {
                tracing::warn!(run_id = %self.run.id, error = %e, "cannot read the session's approval settings: the agent's request is rejected");
                ask.answer(Decision::RejectOnce);
                return Ok(());
            }
        };
        let asks = SourceRule {
            rule: Rule::Always,
            tools: Vec::new(),
        };
        let annotations = ToolAnnotations::default();
        match approval::verdict(mode, &grants, &asks, &call.server, &call.tool, &annotations) {
            Verdict::Run => {
                ask.answer(Decision::AllowOnce);
                return Ok(());
            }
            Verdict::Deny => {
                let mut call = call;
                call.status = ToolCallStatus::Denied;
                call.result = Some(bounded_result(&approval::declined_text(None, false)));
                self.end_agent_call(key, call).await?;
                ask.answer(Decision::RejectOnce);
                return Ok(());
            }
            Verdict::Ask => {}
        }
        let asked_at = self
            .ctx
            .store
            .agent_call_asks(&call)
            .await
            .map_err(|e| unrecorded("question", e))?;
        let mut call = call;
        call.status = ToolCallStatus::AwaitingApproval;
        call.approval = Some(Approval::asked(asked_at));
        self.tally.agent_calls.insert(key.clone(), call.clone());
        self.announce_call(&call);
        self.announce_status(RunStatus::AwaitingApproval).await;
        tracing::info!(run_id = %self.run.id, call = %call.id, "the agent asks the operator before a tool call");
        let waited = self.active.waited.clone();
        waited.begin();
        let began = std::time::Instant::now();
        let decided = self.wait_for_decision(&call.id).await;
        waited.end(began.elapsed());
        let decision = decided
            .approval
            .as_ref()
            .and_then(|a| a.decision)
            .unwrap_or(Decision::RejectOnce);
        let mut call = decided;
        if decision.allows() {
            call.started_at = self
                .ctx
                .store
                .agent_call_allowed(&call.id)
                .await
                .map_err(|e| unrecorded("start", e))?;
            call.status = ToolCallStatus::Running;
            self.announce_call(&call);
        }
        self.tally.agent_calls.insert(key, call);
        self.announce_status(RunStatus::Running).await;
        ask.answer(decision);
        Ok(())
    }

    /// The call as recorded once it is decided (or no longer waits): woken by a decision
    /// recorded here, else read again every [`ASK_POLL`].
    async fn wait_for_decision(&self, id: &ToolCallId) -> ToolCall {
        let decided = self.ctx.decided.clone();
        loop {
            let woken = decided.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            match self.ctx.store.tool_call(id).await {
                Ok(recorded) if !undecided(&recorded.call) => return recorded.call,
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(run_id = %self.run.id, error = %e, "could not read a waiting call; reading it again");
                }
            }
            tokio::select! {
                () = &mut woken => {}
                () = tokio::time::sleep(ASK_POLL) => {}
            }
        }
    }

    /// Shows the run as `status` (waiting for approval while a call of it waits, running
    /// again after) and its session with it, as the session's lists read it.
    async fn announce_status(&self, status: RunStatus) {
        let mut run = self.run.clone();
        run.status = status;
        self.publish(Event::Run(run));
        match self.ctx.store.session(&self.run.session_id).await {
            Ok(s) => self.publish(Event::Session(s.session)),
            Err(e) => {
                tracing::warn!(run_id = %self.run.id, error = %e, "could not announce the session")
            }
        }
    }
}

/// A run ended by a tool call's `what` (start, end, question) the store could not record.
fn unrecorded(what: &str, e: crate::store::StoreError) -> End {
    End::Refused {
        class: RetryClass::ServerError,
        message: limits::error_text(&format!("could not record a tool call's {what}: {e}")),
    }
}

/// A call's title as its `tool`: the agent's words, bounded; `tool` when it gave none.
fn title(t: Option<&str>) -> String {
    let t = t.map(str::trim).filter(|t| !t.is_empty()).unwrap_or("tool");
    t.chars().take(MAX_TITLE_CHARS).collect()
}

/// The conversation before the prompt, as text for a new agent session (the latest part when
/// it is long); none when there is none.
fn earlier(history: &[crate::store::HistoryEntry]) -> Option<String> {
    if history.is_empty() {
        return None;
    }
    let mut text = String::new();
    for m in history {
        let who = match m.role {
            Role::Operator => "Operator",
            Role::Agent => "Agent",
        };
        text.push_str(&format!("{who}:\n{}\n\n", m.content));
    }
    if text.len() > MAX_HISTORY_BYTES {
        let mut cut = text.len() - MAX_HISTORY_BYTES;
        while !text.is_char_boundary(cut) {
            cut += 1;
        }
        text.drain(..cut);
    }
    Some(text.trim_end().to_string())
}
