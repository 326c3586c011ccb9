//! The reads every surface shares: a page of the session list, a session's snapshot (its
//! messages with live text laid over, its runs, the event id to resume from) and a run's
//! detail (its timeline's data).
use super::Engine;
use crate::error::Result;
use crate::store::SessionPage;
use app::wire::{Part, RunDetail, RunId, RunStatus, SessionDetail, SessionId, SessionList};

impl Engine {
    /// A page of sessions, newest first.
    pub async fn sessions(&self, page: &SessionPage) -> Result<SessionList> {
        Ok(self.store().sessions(page).await?)
    }

    /// The session as a client starts from: every event after `last_event_id` is replayed to
    /// a client that resumes from it, so nothing between the read and the stream is lost.
    pub async fn snapshot(
        &self,
        sid: &SessionId,
        include_superseded: bool,
    ) -> Result<SessionDetail> {
        // Take the event id first: any event after it is replayed to a client resuming from it.
        let last_event_id = self.hub().last_id();
        let store = self.store();
        let session = store.session(sid).await?.session;
        // Runs before messages: a run read as ended has its reply's final text in the later
        // read (both are written in one transaction), so no reader sees an ended run beside
        // a reply that has not caught up.
        let runs = store.runs(sid).await?;
        let mut messages: Vec<_> = store
            .messages(sid, include_superseded)
            .await?
            .into_iter()
            .map(|m| self.overlay_live(m))
            .collect();
        store.with_parts(sid, &mut messages).await?;
        let mut runs = runs;
        for run in runs.iter_mut().filter(|r| r.status == RunStatus::Running) {
            let reply = messages
                .iter()
                .find(|m| Some(&m.id) == run.reply_message_id.as_ref());
            let calls = reply
                .and_then(|m| m.parts.as_deref())
                .into_iter()
                .flatten()
                .filter_map(|p| match p {
                    Part::ToolCall { call } => Some(call),
                    Part::Text { .. } => None,
                });
            crate::run::shown(run, calls);
        }
        Ok(SessionDetail {
            session,
            messages,
            runs,
            last_event_id,
        })
    }
    /// A run with its Tier 1 attempts (each naming the model it asked), the tool calls of its
    /// reply, and where instances share the database, the one that executed it.
    pub async fn run_detail(&self, run_id: &RunId) -> Result<RunDetail> {
        let store = self.store();
        let (run, owner) = store.run_and_owner(run_id).await?;
        let mut attempts = store.attempts(run_id).await?;
        // An attempt on the session's own model is recorded without it: named here.
        if attempts.iter().any(|a| a.model.is_none()) {
            let model = store.session(&run.session_id).await?.session.model;
            let model = match self.models().catalogue().resolve(&model) {
                Ok(m) => m.id(),
                Err(_) => model,
            };
            for a in attempts.iter_mut().filter(|a| a.model.is_none()) {
                a.model = Some(model.clone());
            }
        }
        let tool_calls = match &run.reply_message_id {
            Some(reply) => store
                .tool_calls_of_message(reply)
                .await?
                .into_iter()
                .map(|c| c.call)
                .collect(),
            None => Vec::new(),
        };
        let mut run = run;
        crate::run::shown(&mut run, &tool_calls);
        Ok(RunDetail {
            run,
            attempts,
            tool_calls,
            // One instance needs no name: it is the only one.
            instance: owner.filter(|_| store.is_shared()),
        })
    }
}
