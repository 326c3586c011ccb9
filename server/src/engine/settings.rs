//! A session's settings (title, retry setting, tools), changed under its lock: a failure
//! recorded at the same moment cannot leave a background retry in a session that just left
//! `background`.
use super::Engine;
use crate::error::Result;
use crate::metrics::metrics;
use app::wire::{AutoRetry, Session};

impl Engine {
    /// Changes what is given and answers the session. Leaving `background` ends the retry
    /// waiting there (the browser takes over, or nothing does). Carried to its end when the
    /// client hangs up, like every command: the change and its announcement go together.
    pub async fn update_settings(
        &self,
        session_id: &str,
        title: Option<&str>,
        auto_retry: Option<AutoRetry>,
        tools: Option<&[String]>,
    ) -> Result<Session> {
        let engine = self.clone();
        let session_id = session_id.to_string();
        let (title, tools) = (title.map(str::to_string), tools.map(<[String]>::to_vec));
        self.carried(async move {
            engine
                .settings_changed(&session_id, title.as_deref(), auto_retry, tools.as_deref())
                .await
        })
        .await
    }

    async fn settings_changed(
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
