//! The built-in tools that act on sessions and read the models: `list_sessions`,
//! `send_message`, `retry_session`, `stop_session`, `rename_session`, `list_models`.
use super::{authorize, BuiltinTool, Caller, Commands};
use crate::error::{Error, Result};
use app::wire::{ModelList, Receipt, RetryReceipt, Run, Session, SessionId, SessionList};
use rmcp::model::ToolAnnotations;
use rmcp::schemars::JsonSchema;
use serde::Deserialize;

/// `list_sessions`: an optional page.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct ListSessions {
    /// At most this many sessions.
    #[serde(default)]
    #[schemars(range(min = 1, max = 1000))]
    pub limit: Option<u64>,
    /// Only sessions older than this one (the `next_before` of the previous page).
    #[serde(default)]
    pub before: Option<String>,
    /// Words of the title (each must appear, in any case).
    #[serde(default)]
    pub q: Option<String>,
}

impl BuiltinTool for ListSessions {
    const NAME: &'static str = "list_sessions";
    const DESCRIPTION: &'static str = "List sessions, newest first: for the operator every session, for a session's agent token only that session's sub-sessions. 100 at a time (`limit`: 1 to 1000); when more follow, `next_before` is the `before` that lists the next page. `q` keeps the sessions whose title holds each of its words.";
    type Answer = SessionList;

    fn annotations() -> Option<ToolAnnotations> {
        Some(ToolAnnotations::new().read_only(true))
    }

    async fn call(self, commands: &impl Commands, caller: &Caller) -> Result<SessionList> {
        let within = match caller {
            Caller::Operator => None,
            Caller::Agent(me) => Some(me),
        };
        commands
            .sessions(self.limit, self.before, self.q.as_deref(), within)
            .await
    }
}

/// `send_message`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct SendMessage {
    /// The session's id (see list_sessions).
    pub session: SessionId,
    /// The message.
    #[schemars(length(min = 1, max = app::wire::MAX_CONTENT_CHARS))]
    pub content: String,
}

impl BuiltinTool for SendMessage {
    const NAME: &'static str = "send_message";
    const DESCRIPTION: &'static str = "Post an operator message to a session; it starts a run, or queues behind the active one. Answers the receipt.";
    type Answer = Receipt;

    async fn call(self, commands: &impl Commands, caller: &Caller) -> Result<Receipt> {
        authorize(commands, caller, &self.session).await?;
        commands.post_message(&self.session, &self.content).await
    }
}

/// `retry_session`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct RetrySession {
    /// The session's id (see list_sessions).
    pub session: SessionId,
}

impl BuiltinTool for RetrySession {
    const NAME: &'static str = "retry_session";
    const DESCRIPTION: &'static str = "Retry the session's failed last turn now: resends the prompt, or continues a partial reply. Refused with retry.busy, retry.stopped or retry.nothing_failed.";
    type Answer = RetryReceipt;

    async fn call(self, commands: &impl Commands, caller: &Caller) -> Result<RetryReceipt> {
        let from = authorize(commands, caller, &self.session).await?;
        commands.retry(&self.session, from.as_deref()).await
    }
}

/// `stop_session`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct StopSession {
    /// The session's id (see list_sessions).
    pub session: SessionId,
}

impl BuiltinTool for StopSession {
    const NAME: &'static str = "stop_session";
    const DESCRIPTION: &'static str = "Stop what the session is doing: cancels its running run (else its next queued one) and its waiting background retry, and answers that run (with only a waiting retry, the failed run it was for). Refused with conflict when nothing runs or waits.";
    type Answer = Run;

    fn annotations() -> Option<ToolAnnotations> {
        Some(ToolAnnotations::new().destructive(true))
    }

    async fn call(self, commands: &impl Commands, caller: &Caller) -> Result<Run> {
        authorize(commands, caller, &self.session).await?;
        commands.stop(&self.session).await
    }
}

/// `rename_session`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct RenameSession {
    /// The session's id; an agent may leave it out for its own session.
    #[serde(default)]
    pub session: Option<SessionId>,
    /// The new title.
    #[schemars(length(min = 1, max = 200))]
    pub title: String,
}

impl BuiltinTool for RenameSession {
    const NAME: &'static str = "rename_session";
    const DESCRIPTION: &'static str = "Give a session a new title: the agent's own session, or one of its sub-sessions. Answers the session.";
    type Answer = Session;

    fn annotations() -> Option<ToolAnnotations> {
        Some(
            ToolAnnotations::new()
                .read_only(false)
                .destructive(false)
                .idempotent(true),
        )
    }

    // An agent may rename its own session (the demo's tool that changes something).
    async fn call(self, commands: &impl Commands, caller: &Caller) -> Result<Session> {
        let session = match (self.session, caller) {
            (Some(s), _) => s,
            (None, Caller::Agent(me)) => me.clone(),
            (None, Caller::Operator) => {
                return Err(Error::invalid(format!(
                    "the arguments of `{}`: `session` is required",
                    Self::NAME
                )))
            }
        };
        if *caller != Caller::Agent(session.clone()) {
            authorize(commands, caller, &session).await?;
        }
        commands.rename(&session, &self.title).await
    }
}

/// `list_models`: no input.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct ListModels {}

impl BuiltinTool for ListModels {
    const NAME: &'static str = "list_models";
    const DESCRIPTION: &'static str = "List the models a session can use: each `<provider>/<model>` id with its status (ok; cooling until `cooling_until`, ms since the epoch; down), whether its steps are sent tools, and the chain it falls back to before a step's first delta; and the default model.";
    type Answer = ModelList;

    fn annotations() -> Option<ToolAnnotations> {
        Some(ToolAnnotations::new().read_only(true))
    }

    // Read-only and secret-free: anyone who may call a tool may list the models.
    async fn call(self, commands: &impl Commands, _: &Caller) -> Result<ModelList> {
        Ok(commands.model_list().await)
    }
}
