//! One agent process (CONTRACT §9): started through [`crate::child_env`], spoken to over ACP,
//! holding one Mulligan session's agent session and running one turn at a time; its exit
//! fails the turn it was running.
use super::{lines, translate, AgentSpec, TurnItem};
use crate::llm::ProviderError;
use agent_client_protocol::v1::schema::{
    AuthenticateRequest, ClientCapabilities, InitializeRequest, InitializeResponse,
    RequestPermissionRequest, SessionNotification,
};
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::{Agent, Client};
use app::wire::RetryClass;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, OwnedSemaphorePermit};
use tokio_util::sync::CancellationToken;

/// How long an agent has to answer `initialize`.
const INITIALIZE_WITHIN: Duration = Duration::from_secs(60);
/// How much of an agent's stderr is kept to say why it exited.
const STDERR_TAIL: usize = 2048;

/// Where the running turn's items go (its permission requests too: the run decides them).
pub(super) struct Route {
    pub session: String,
    pub tx: mpsc::Sender<TurnItem>,
}

/// A running agent process and its connection.
pub(super) struct AgentProcess {
    pub cx: ConnectionTo<Agent>,
    pub load_session: bool,
    /// The agent session open in this process (none until one is made or loaded).
    pub session: Mutex<Option<String>>,
    /// Held by the turn running here: one at a time.
    pub busy: Arc<tokio::sync::Mutex<()>>,
    pub last_used: Mutex<Instant>,
    route: Arc<Mutex<Option<Route>>>,
    /// Cancelled once the process is gone (exited, killed, its connection closed).
    pub gone: CancellationToken,
    /// Cancel to stop the process.
    kill: CancellationToken,
    exit: Arc<Mutex<Option<String>>>,
    _slot: OwnedSemaphorePermit,
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        self.kill.cancel();
    }
}

fn refused(class: RetryClass, message: String) -> ProviderError {
    ProviderError::Agent {
        class,
        message,
        retry_after: None,
    }
}

impl AgentProcess {
    /// Starts the agent and initializes it.
    pub async fn start(
        spec: &AgentSpec,
        slot: OwnedSemaphorePermit,
    ) -> Result<Arc<AgentProcess>, ProviderError> {
        let mut cmd = crate::child_env::command(&spec.command, spec.env.iter());
        cmd.args(&spec.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Some(cwd) = &spec.cwd {
            cmd.current_dir(cwd);
        }
        let mut child = cmd.spawn().map_err(|e| {
            refused(
                RetryClass::AgentError,
                format!(
                    "could not start the agent {:?}: {e}; check its \"command\" in MULLIGAN_PROVIDERS",
                    spec.command
                ),
            )
        })?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(refused(
                RetryClass::AgentExited,
                "the agent's stdio was not opened".into(),
            ));
        };
        let gone = CancellationToken::new();
        let kill = CancellationToken::new();
        let exit = Arc::new(Mutex::new(None));
        let tail = Arc::new(Mutex::new(String::new()));
        tokio::spawn(keep_tail(stderr, tail.clone()));
        {
            let (gone, kill, exit) = (gone.clone(), kill.clone(), exit.clone());
            tokio::spawn(async move {
                // Dropped with the task (Mulligan shutting down) too: the agent and what it
                // started end with it.
                let mut child = crate::child_env::Child(child);
                let status = tokio::select! {
                    status = child.0.wait() => status.ok(),
                    () = kill.cancelled() => {
                        crate::child_env::kill_group(&mut child.0);
                        child.0.wait().await.ok()
                    }
                };
                let said = tail
                    .lock()
                    .map(|t| t.trim().to_string())
                    .unwrap_or_default();
                let how = match status.and_then(|s| s.code()) {
                    Some(code) => format!("exited with status {code}"),
                    None => "was stopped".to_string(),
                };
                let text = if said.is_empty() {
                    format!("the agent's process {how}")
                } else {
                    format!("the agent's process {how}: {said}")
                };
                if let Ok(mut e) = exit.lock() {
                    *e = Some(text);
                }
                gone.cancel();
            });
        }
        let route: Arc<Mutex<Option<Route>>> = Arc::new(Mutex::new(None));
        let (cx_tx, cx_rx) = tokio::sync::oneshot::channel();
        let connection = {
            let (on_update, on_ask) = (route.clone(), route.clone());
            let until = gone.clone();
            Client
                .v1()
                .on_receive_notification(
                    async move |n: SessionNotification, _cx| {
                        relay(&on_update, n).await;
                        Ok(())
                    },
                    agent_client_protocol::on_receive_notification!(),
                )
                .on_receive_request(
                    async move |ask: RequestPermissionRequest, responder, _cx| {
                        let tx = on_ask.lock().ok().and_then(|r| {
                            r.as_ref()
                                .filter(|r| r.session == ask.session_id.0.as_ref())
                                .map(|r| r.tx.clone())
                        });
                        let (item, answer) = crate::llm::AgentAsk::new(translate::ask_of(&ask));
                        // Sent in the connection's order (after the updates before it); the
                        // answer is awaited apart from the connection's loop, so a question
                        // that waits for the operator holds up no other message.
                        let heard = match tx {
                            Some(tx) => tx.send(TurnItem::Ask(item)).await.is_ok(),
                            None => false, // no turn runs: nobody to ask
                        };
                        tokio::spawn(async move {
                            let decision = if heard { answer.await.ok() } else { None };
                            let _ = responder.respond(translate::answer(&ask, decision));
                        });
                        Ok(())
                    },
                    agent_client_protocol::on_receive_request!(),
                )
                .connect_with(
                    lines::transport(stdin, stdout),
                    async move |cx: ConnectionTo<Agent>| {
                        let _ = cx_tx.send(cx);
                        until.cancelled().await;
                        Ok(())
                    },
                )
        };
        {
            let gone = gone.clone();
            tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::debug!(error = %e, "an agent's connection ended");
                }
                gone.cancel();
            });
        }
        let cx = tokio::select! {
            cx = cx_rx => cx.map_err(|_| refused(RetryClass::AgentExited, "the agent's connection closed before it opened".into()))?,
            () = gone.cancelled() => return Err(exited(&exit).await),
        };
        let init = InitializeRequest::new(agent_client_protocol::schema::ProtocolVersion::V1)
            .client_capabilities(ClientCapabilities::new());
        let answered = tokio::select! {
            a = tokio::time::timeout(INITIALIZE_WITHIN, cx.send_request(init).block_task()) => a,
            () = gone.cancelled() => return Err(exited(&exit).await),
        };
        let init = match answered {
            Ok(Ok(init)) => init,
            Ok(Err(e)) => {
                kill.cancel();
                return Err(failure(&e, &exit).await);
            }
            Err(_) => {
                kill.cancel();
                return Err(refused(
                    RetryClass::AgentExited,
                    format!(
                        "the agent did not answer initialize within {} s",
                        INITIALIZE_WITHIN.as_secs()
                    ),
                ));
            }
        };
        if let Some(method) = &spec.authenticate {
            if let Err(e) = authenticate(&cx, &init, method, &gone, &exit).await {
                kill.cancel();
                return Err(e);
            }
        }
        Ok(Arc::new(AgentProcess {
            cx,
            load_session: init.agent_capabilities.load_session,
            session: Mutex::new(None),
            busy: Arc::new(tokio::sync::Mutex::new(())),
            last_used: Mutex::new(Instant::now()),
            route,
            gone,
            kill,
            exit,
            _slot: slot,
        }))
    }

    /// Sends the items of `session`'s updates to `route` until [`Self::unroute`].
    pub fn route(&self, route: Route) {
        if let Ok(mut r) = self.route.lock() {
            *r = Some(route);
        }
    }

    pub fn unroute(&self) {
        if let Ok(mut r) = self.route.lock() {
            *r = None;
        }
        if let Ok(mut at) = self.last_used.lock() {
            *at = Instant::now();
        }
    }

    /// Stops the process.
    pub fn stop(&self) {
        self.kill.cancel();
    }

    /// Why the process is gone, once it is (waiting a moment for its exit to be read).
    pub async fn exit_error(&self) -> ProviderError {
        exited(&self.exit).await
    }

    /// A request's error as the run's failure: the process's exit when the error only says
    /// its connection closed (that can arrive before the exit is seen).
    pub async fn failure(&self, e: &agent_client_protocol::Error) -> ProviderError {
        failure(e, &self.exit).await
    }

    pub fn idle_for(&self) -> Duration {
        self.last_used
            .lock()
            .map(|at| at.elapsed())
            .unwrap_or_default()
    }
}

/// Picks the catalogue's auth method, one the agent offered in `initialize`.
async fn authenticate(
    cx: &ConnectionTo<Agent>,
    init: &InitializeResponse,
    method: &str,
    gone: &CancellationToken,
    exit: &Mutex<Option<String>>,
) -> Result<(), ProviderError> {
    let offered: Vec<&str> = init
        .auth_methods
        .iter()
        .map(|m| m.id().0.as_ref())
        .collect();
    if !offered.contains(&method) {
        return Err(refused(
            RetryClass::AuthFailed,
            format!(
                "the agent offers no auth method {method:?} (it offers: {}); fix \"authenticate\" in MULLIGAN_PROVIDERS",
                if offered.is_empty() { "none".to_string() } else { offered.join(", ") }
            ),
        ));
    }
    let request = AuthenticateRequest::new(method.to_string());
    let answered = tokio::select! {
        a = tokio::time::timeout(INITIALIZE_WITHIN, cx.send_request(request).block_task()) => a,
        () = gone.cancelled() => return Err(exited(exit).await),
    };
    match answered {
        Ok(Ok(_)) => Ok(()),
        // A process that went meanwhile is `agent_exited`, as anywhere; a refusal is the
        // configuration's to fix.
        Ok(Err(e)) => Err(match failure(&e, exit).await {
            ProviderError::Agent {
                class: RetryClass::AgentExited,
                ..
            } => exited(exit).await,
            refusal => refused(
                RetryClass::AuthFailed,
                format!("the agent refused authenticate {method:?}: {refusal}"),
            ),
        }),
        Err(_) => Err(refused(
            RetryClass::AuthFailed,
            format!(
                "the agent did not answer authenticate within {} s",
                INITIALIZE_WITHIN.as_secs()
            ),
        )),
    }
}

/// A request's error: the agent's own (classified), or the exit of a process whose
/// connection closed under the request.
async fn failure(e: &agent_client_protocol::Error, exit: &Mutex<Option<String>>) -> ProviderError {
    if agent_client_protocol::is_incoming_transport_closed(e)
        || agent_client_protocol::is_connection_terminated(e)
    {
        return exited(exit).await;
    }
    super::failure(e)
}

/// The error of a process that is gone: its exit status and the end of its stderr.
async fn exited(exit: &Mutex<Option<String>>) -> ProviderError {
    for _ in 0..50 {
        if let Some(text) = exit.lock().ok().and_then(|e| e.clone()) {
            return refused(RetryClass::AgentExited, text);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    refused(
        RetryClass::AgentExited,
        "the agent's connection closed".into(),
    )
}

/// Keeps the last [`STDERR_TAIL`] bytes of the agent's stderr (bounded lines, read to the end).
async fn keep_tail(stderr: tokio::process::ChildStderr, tail: Arc<Mutex<String>>) {
    use futures::StreamExt;
    use tokio_util::codec::{FramedRead, LinesCodec};
    let mut lines = FramedRead::new(stderr, LinesCodec::new_with_max_length(STDERR_TAIL));
    while let Some(line) = lines.next().await {
        let Ok(line) = line else { continue };
        if let Ok(mut t) = tail.lock() {
            t.push_str(&line);
            t.push('\n');
            if t.len() > STDERR_TAIL {
                let mut cut = t.len() - STDERR_TAIL;
                while !t.is_char_boundary(cut) {
                    cut += 1;
                }
                t.drain(..cut);
            }
        }
    }
}

/// An update of the running turn's session, as the turn's item.
async fn relay(route: &Mutex<Option<Route>>, n: SessionNotification) {
    let tx = match route.lock() {
        Ok(r) => match r.as_ref() {
            Some(r) if r.session == n.session_id.0.as_ref() => r.tx.clone(),
            _ => return, // a replay of `session/load`, or an update after its turn
        },
        Err(_) => return,
    };
    let item = translate::item_of(n.update);
    // Backpressure: a turn that reads slowly holds the agent's next message, never drops it.
    let _ = tx.send(item).await;
}
