//! ACP agents as a session's engine (CONTRACT §9), the client side: a bounded pool of agent
//! processes, one per Mulligan session that runs on an agent, each turn one
//! `session/prompt` whose updates come out as a provider stream's items.
mod lines;
mod pool;
mod process;
mod translate;
pub use pool::{Agents, PoolLimits};

use crate::llm::{DeltaStream, ProviderError, StreamItem};
use crate::retry::agent_failure;
use agent_client_protocol::v1::schema::{
    CancelNotification, ContentBlock, LoadSessionRequest, NewSessionRequest, PromptRequest,
    StopReason, TextContent,
};
use app::wire::RetryClass;
use process::{AgentProcess, Route};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// How long an agent has after `session/cancel` to end its turn before its process is stopped.
pub const CANCEL_WITHIN: Duration = Duration::from_secs(5);
/// How long opening an agent session (`session/new`, `session/load`) may take.
const OPEN_WITHIN: Duration = Duration::from_secs(60);
/// A turn's items buffered between the agent and the run.
const TURN_BUFFER: usize = 256;

/// How one agent is started, resolved from its catalogue entry: its command, arguments, the
/// variables it gets beside the clean environment (values resolved: secrets), its directory.
#[derive(Clone, Debug)]
pub struct AgentSpec {
    pub command: String,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub cwd: Option<PathBuf>,
    /// The auth method to pick after `initialize`, if any.
    pub authenticate: Option<String>,
}

/// One item of an agent's turn, as the process hears it.
#[derive(Debug)]
enum TurnItem {
    Text(String),
    Thought,
    Call(crate::llm::AgentCall),
    Ask(crate::llm::AgentAsk),
    /// The tokens in the agent session's context (`usage_update`'s `used`).
    Usage(u64),
    Heard,
    End(Result<StopReason, ProviderError>),
}

/// A turn to run on an agent.
pub struct TurnRequest {
    /// The catalogue entry's name.
    pub provider: String,
    /// The Mulligan session it runs for.
    pub session: String,
    /// The agent session recorded for this Mulligan session, to load when no process holds it.
    pub recorded: Option<String>,
    /// Start a new agent session even if one is open or recorded (Regenerate: the agent's
    /// memory holds turns that were superseded).
    pub new_session: bool,
    /// The prompt's text.
    pub prompt: String,
    /// The conversation before the prompt, sent ahead of it when the agent session is new.
    pub history: Option<String>,
}

/// How a turn ended, readable once its stream is done.
#[derive(Clone, Debug, Default)]
pub struct Ending(Arc<Mutex<Option<StopReason>>>);

impl Ending {
    /// The agent's stop reason as the contract's word (`end_turn`, `max_tokens`,
    /// `max_turn_requests`, `refusal`, `cancelled`), once the turn answered.
    pub fn stop_reason(&self) -> Option<&'static str> {
        let stop = self.0.lock().ok().and_then(|s| *s)?;
        Some(match stop {
            StopReason::EndTurn => "end_turn",
            StopReason::MaxTokens => "max_tokens",
            StopReason::MaxTurnRequests => "max_turn_requests",
            StopReason::Refusal => "refusal",
            StopReason::Cancelled => "cancelled",
            _ => "other",
        })
    }
}

/// An agent turn once its prompt is sent.
pub struct OpenedTurn {
    /// The turn's text and liveness as a provider stream's items (`Done` when the agent
    /// answered the prompt). Dropped before its end: the turn is cancelled with
    /// `session/cancel`, and the process stopped after [`CANCEL_WITHIN`].
    pub stream: DeltaStream,
    /// The agent session it runs in (to record for `session/load` after a restart).
    pub agent_session: String,
    /// Whether that session is new (not loaded or kept open).
    pub new_session: bool,
    pub ending: Ending,
}

/// An agent's JSON-RPC error as the run's failure (classified as CONTRACT §9 says).
fn failure(e: &agent_client_protocol::Error) -> ProviderError {
    let (class, retry_after) =
        agent_failure::classify(i32::from(e.code), &e.message, e.data.as_ref());
    let whole = translate::error_text(&e.message, e.data.as_ref());
    let message = crate::llm::limits::truncate(&whole, 2000).to_string();
    ProviderError::Agent {
        class,
        message: if message.is_empty() {
            format!("the agent answered error {}", i32::from(e.code))
        } else {
            message
        },
        retry_after,
    }
}

fn refused(message: String) -> ProviderError {
    ProviderError::Agent {
        class: RetryClass::AgentError,
        message,
        retry_after: None,
    }
}

impl Agents {
    /// Runs a turn: the session's process (started, and its agent session loaded or made,
    /// when none holds it), then `session/prompt`.
    pub async fn prompt(&self, req: TurnRequest) -> Result<OpenedTurn, ProviderError> {
        let spec = self
            .spec(&req.provider)
            .ok_or_else(|| refused(format!("no agent {:?} in the catalogue", req.provider)))?;
        self.start_reaper();
        let key = (req.provider.clone(), req.session.clone());
        let (proc, busy) = loop {
            let proc = self.process(&key, &spec).await?;
            let busy = tokio::select! {
                busy = proc.busy.clone().lock_owned() => busy,
                () = proc.gone.cancelled() => {
                    self.forget(&key, &proc);
                    continue;
                }
            };
            if proc.gone.is_cancelled() {
                self.forget(&key, &proc);
                continue;
            }
            break (proc, busy);
        };
        let open = proc.session.lock().ok().and_then(|s| s.clone());
        let (agent_session, new_session) = match open {
            Some(s) if !req.new_session => (s, false),
            _ => match self.open_session(&proc, &spec, &req).await {
                Ok(opened) => opened,
                Err(e) => {
                    proc.stop();
                    self.forget(&key, &proc);
                    return Err(e);
                }
            },
        };
        if let Ok(mut s) = proc.session.lock() {
            *s = Some(agent_session.clone());
        }
        let text = match (&req.history, new_session) {
            (Some(h), true) if !h.trim().is_empty() => format!(
                "Earlier in this conversation (for context; it is not a new request):\n\n{h}\n\n---\n\n{}",
                req.prompt
            ),
            _ => req.prompt.clone(),
        };
        let (tx, rx) = mpsc::channel(TURN_BUFFER);
        proc.route(Route {
            session: agent_session.clone(),
            tx: tx.clone(),
        });
        let finished = CancellationToken::new();
        let ending = Ending::default();
        {
            let (proc, finished, ending) = (proc.clone(), finished.clone(), ending.clone());
            let (pool, key) = (self.clone(), key.clone());
            let prompt = PromptRequest::new(
                agent_session.clone(),
                vec![ContentBlock::Text(TextContent::new(text))],
            );
            tokio::spawn(async move {
                let _busy = busy;
                // The answer is taken in the connection's order, after every update the
                // agent sent before it: an unordered wait could see `end_turn` first and
                // drop the reply's last chunks.
                let (answer_tx, answer_rx) = tokio::sync::oneshot::channel();
                let registered =
                    proc.cx
                        .prepare_request(prompt)
                        .on_receiving_result(move |result| async move {
                            let _ = answer_tx.send(result);
                            Ok(())
                        });
                let answered = match registered {
                    Err(e) => Err(proc.failure(&e).await),
                    Ok(()) => tokio::select! {
                        biased;
                        a = answer_rx => match a {
                            Ok(Ok(answer)) => Ok(answer),
                            Ok(Err(e)) => Err(proc.failure(&e).await),
                            Err(_) => Err(proc.exit_error().await),
                        },
                        () = proc.gone.cancelled() => Err(proc.exit_error().await),
                    },
                };
                proc.unroute();
                // An agent may answer the next prompt out of step after a failed or a
                // cancelled one (Claude Code answers it at once, empty, and its reply comes
                // during the prompt after): the next turn reopens the session in a fresh
                // process.
                let out_of_step =
                    !matches!(&answered, Ok(a) if a.stop_reason != StopReason::Cancelled);
                if out_of_step {
                    proc.stop();
                    pool.forget(&key, &proc);
                }
                let end = match answered {
                    Ok(answer) => {
                        // The turn's own count, where the agent gives one (Claude Code's
                        // `usage_update` carries no `used`): counted as the context is, by
                        // its most.
                        if let Some(usage) = &answer.usage {
                            let _ = tx.send(TurnItem::Usage(usage.total_tokens)).await;
                        }
                        if let Ok(mut e) = ending.0.lock() {
                            *e = Some(answer.stop_reason);
                        }
                        Ok(answer.stop_reason)
                    }
                    Err(e) => Err(e),
                };
                let _ = tx.send(TurnItem::End(end)).await;
                finished.cancel();
            });
        }
        let guard = CancelOnDrop {
            proc: proc.clone(),
            session: agent_session.clone(),
            finished,
            pool: self.clone(),
            key,
        };
        // A turn's tokens: the most its context held (what its last model call sent, at
        // least), counted as it grows.
        let stream = futures::stream::unfold(
            (rx, Some(guard), 0u64),
            |(mut rx, mut guard, mut peak)| async move {
                guard.as_ref()?;
                let item = match rx.recv().await {
                    Some(TurnItem::Usage(used)) if used > peak => {
                        let grown = used - peak;
                        peak = used;
                        Ok(StreamItem::Usage {
                            total_tokens: grown,
                        })
                    }
                    Some(TurnItem::Usage(_)) => Ok(StreamItem::Heard),
                    Some(TurnItem::Text(t)) => Ok(StreamItem::Delta(t)),
                    Some(TurnItem::Call(call)) => Ok(StreamItem::AgentCall(call)),
                    Some(TurnItem::Ask(ask)) => Ok(StreamItem::AgentAsk(ask)),
                    Some(TurnItem::Thought | TurnItem::Heard) => Ok(StreamItem::Heard),
                    Some(TurnItem::End(Ok(_))) => {
                        if let Some(g) = guard.take() {
                            g.finished.cancel();
                        }
                        Ok(StreamItem::Done)
                    }
                    Some(TurnItem::End(Err(e))) => {
                        if let Some(g) = guard.take() {
                            g.finished.cancel();
                        }
                        Err(e)
                    }
                    None => return None,
                };
                Some((item, (rx, guard, peak)))
            },
        );
        Ok(OpenedTurn {
            stream: Box::pin(stream),
            agent_session,
            new_session,
            ending,
        })
    }

    /// Loads the recorded agent session when the agent can, else makes a new one.
    async fn open_session(
        &self,
        proc: &AgentProcess,
        spec: &AgentSpec,
        req: &TurnRequest,
    ) -> Result<(String, bool), ProviderError> {
        let cwd = match &spec.cwd {
            Some(c) => c.clone(),
            None => std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
        };
        if let (Some(recorded), true, false) = (&req.recorded, proc.load_session, req.new_session) {
            let load = LoadSessionRequest::new(recorded.clone(), cwd.clone());
            let loaded = tokio::select! {
                l = tokio::time::timeout(OPEN_WITHIN, proc.cx.send_request(load).block_task()) => l,
                () = proc.gone.cancelled() => return Err(proc.exit_error().await),
            };
            match loaded {
                Ok(Ok(_)) => return Ok((recorded.clone(), false)),
                Ok(Err(e)) => {
                    tracing::info!(error = %e.message, "the agent did not load its session: a new one is made");
                }
                Err(_) => {
                    return Err(refused(format!(
                        "the agent did not load its session within {} s",
                        OPEN_WITHIN.as_secs()
                    )))
                }
            }
        }
        let made = tokio::select! {
            m = tokio::time::timeout(OPEN_WITHIN, proc.cx.send_request(NewSessionRequest::new(cwd)).block_task()) => m,
            () = proc.gone.cancelled() => return Err(proc.exit_error().await),
        };
        match made {
            Ok(Ok(made)) => Ok((made.session_id.0.to_string(), true)),
            Ok(Err(e)) => Err(proc.failure(&e).await),
            Err(_) => Err(refused(format!(
                "the agent did not open a session within {} s",
                OPEN_WITHIN.as_secs()
            ))),
        }
    }
}

/// Cancels a turn whose stream is dropped before its end: `session/cancel`, then the
/// process stopped if the agent has not ended the turn within [`CANCEL_WITHIN`].
struct CancelOnDrop {
    proc: Arc<AgentProcess>,
    session: String,
    finished: CancellationToken,
    pool: Agents,
    key: (String, String),
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if self.finished.is_cancelled() {
            return;
        }
        let _ = self
            .proc
            .cx
            .send_notification(CancelNotification::new(self.session.clone()));
        // The session's next turn, which may start at once, reopens the agent session in a
        // fresh process: this one may answer it out of step. This one goes once it has
        // ended the cancelled turn (the prompt's task stops it), or in 5 s.
        self.pool.forget(&self.key, &self.proc);
        let (proc, finished) = (self.proc.clone(), self.finished.clone());
        tokio::spawn(async move {
            if tokio::time::timeout(CANCEL_WITHIN, finished.cancelled())
                .await
                .is_err()
            {
                tracing::info!(
                    "the agent did not end a cancelled turn within 5 s: its process is stopped"
                );
                proc.stop();
            }
        });
    }
}
