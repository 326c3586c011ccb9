//! The session reads every surface shares: a page of the session list and a session's
//! snapshot (its messages with live text laid over, its runs, the event id to resume from).
use super::Engine;
use crate::error::Result;
use crate::store::SessionPage;
use app::wire::SessionId;
use app::wire::{Session, SessionDetail};

impl Engine {
    /// A page of sessions, newest first.
    pub async fn sessions(&self, page: &SessionPage) -> Result<Vec<Session>> {
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
        let mut messages: Vec<_> = store
            .messages(sid, include_superseded)
            .await?
            .into_iter()
            .map(|m| self.overlay_live(m))
            .collect();
        store.with_parts(sid, &mut messages).await?;
        let runs = store.runs(sid).await?;
        Ok(SessionDetail {
            session,
            messages,
            runs,
            last_event_id,
        })
    }
}
