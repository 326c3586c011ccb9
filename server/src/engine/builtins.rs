//! The session commands the built-in `mulligan` tools act through, from MCP and from a run's
//! model alike: the HTTP API's own code paths, so a tool does nothing the API would refuse.
//! A run sees them only through `run::Builtins`' one method; what stands behind it is the
//! engine, since those commands queue and launch runs.
use super::{Deciding, Engine};
use crate::error::Result;
use crate::tools::builtin::Caller;
use app::wire::SessionId;
use futures::future::BoxFuture;
use serde_json::Value;

/// The session commands the built-in tools act through: the HTTP API's own code paths.
impl crate::tools::builtin::Commands for Engine {
    async fn is_descendant(&self, ancestor: &SessionId, session: &SessionId) -> Result<bool> {
        Ok(self.store().is_descendant(ancestor, session).await?)
    }
    async fn sessions(
        &self,
        limit: Option<u64>,
        before: Option<String>,
        q: Option<&str>,
        within: Option<&SessionId>,
    ) -> Result<app::wire::SessionList> {
        let page = crate::store::SessionPage::new(limit, before, q)?;
        // The family is filtered first, then paged, so pages are never short.
        Ok(match within {
            None => self.store().sessions(&page).await?,
            Some(root) => self.store().descendant_sessions(&page, root).await?,
        })
    }
    async fn post_message(&self, session: &SessionId, content: &str) -> Result<app::wire::Receipt> {
        Engine::post_message(self, session, content).await
    }
    async fn retry(
        &self,
        session: &SessionId,
        from: Option<&str>,
    ) -> Result<app::wire::RetryReceipt> {
        Engine::retry(self, session, from).await
    }
    async fn stop(&self, session: &SessionId) -> Result<app::wire::Run> {
        Engine::stop(self, session).await
    }
    async fn model_list(&self) -> app::wire::ModelList {
        self.models().list(crate::clock::now_ms()).await
    }
    async fn rename(&self, session: &SessionId, title: &str) -> Result<app::wire::Session> {
        let patch = app::wire::PatchSession {
            title: Some(title.to_string()),
            ..Default::default()
        };
        Engine::patch_session(self, session, patch).await
    }
    async fn approvals(&self) -> Result<app::wire::Approvals> {
        Engine::approvals(self, None, None).await
    }
    async fn decide(
        &self,
        run: &app::wire::RunId,
        call: &app::wire::ToolCallId,
        decision: app::wire::Decision,
        reason: Option<String>,
    ) -> Result<app::wire::ToolCall> {
        let deciding = Deciding {
            decision,
            reason,
            by: Some(app::wire::DecidedBy::Mcp),
            from: None,
        };
        Engine::decide(self, run, call, deciding).await
    }
}

/// The built-in tools a run's model calls act through the same session commands.
impl crate::run::Builtins for Engine {
    fn call<'a>(
        &'a self,
        caller: &'a Caller,
        tool: &'a str,
        args: Value,
    ) -> BoxFuture<'a, Result<Value>> {
        Box::pin(crate::tools::builtin::run(self, caller, tool, args))
    }
}
