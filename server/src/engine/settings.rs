//! A session's settings (title, retry setting, tools), changed under its lock: a failure
//! recorded at the same moment cannot leave a background retry in a session that just left
//! `background`.
use super::Engine;
use crate::error::Result;
use crate::metrics::metrics;
use app::wire::{AutoRetry, Session};

impl Engine {
    /// Changes what is given and answers the session. Leaving `background` ends the retry
    /// waiting there (the browser takes over, or nothing does).
    pub async fn update_settings(
        &self,
        session_id: &str,
        title: Option<&str>,
        auto_retry: Option<AutoRetry>,
        tools: Option<&[String]>,
    ) -> Result<Session> {
        self.store().session_exists(session_id).await?;
        let _guard = self.lock(session_id).await?;
        let session = self
            .store()
            .update_session(session_id, title, auto_retry, tools)
            .await?;
        if session.auto_retry != AutoRetry::Background
            && self.store().clear_waiting_retry(session_id).await?
        {
            tracing::info!(session = %session_id, "the session left background retries: its waiting retry ended");
            metrics().background_retry("cancelled");
        }
        self.publish_session(session_id).await
    }
}
