//! A session's own commands: creating one, and changing its settings (title, retry setting,
//! tools). Settings change under the session's lock: a failure recorded at the same moment
//! cannot leave a background retry in a session that just left `background`.
use super::Engine;
use crate::error::{Error, Result};
use crate::metrics::metrics;
use crate::secrets::{hex_sha256, random_token};
use crate::store::{NewSession, SessionChange};
use app::wire::SessionId;
use app::wire::{AutoRetry, CreateSession, CreatedSession, Event, PatchSession, Session};

/// A session's title and model are at most this many characters (after trim).
const MAX_TITLE_CHARS: usize = 200;
const MAX_MODEL_CHARS: usize = 200;

/// The session commands' own state: what a new session gets when it asks for nothing.
pub(super) struct Defaults {
    /// The model of a session created without one.
    pub default_model: String,
}

impl Engine {
    /// Creates a session (a sub-session when `parent_id` names one) with a fresh agent
    /// token, announces it, and answers it with the token (the store keeps only its hash).
    pub async fn create_session(&self, new: CreateSession) -> Result<CreatedSession> {
        let store = self.store();
        let title = match new.title.as_deref().map(str::trim) {
            Some(t) if t.chars().count() > MAX_TITLE_CHARS => {
                return Err(Error::invalid(format!(
                    "title is longer than {MAX_TITLE_CHARS} characters"
                )))
            }
            Some(t) if !t.is_empty() => t.to_string(),
            _ => "New session".to_string(),
        };
        let model = match new.model.as_deref().map(str::trim) {
            Some("") => {
                return Err(Error::invalid(
                    "model is empty: leave it out for the default",
                ))
            }
            Some(m) if m.chars().count() > MAX_MODEL_CHARS => {
                return Err(Error::invalid(format!(
                    "model is longer than {MAX_MODEL_CHARS} characters"
                )))
            }
            Some(m) => {
                self.models()
                    .catalogue()
                    .resolve(m)
                    .map_err(|e| Error::invalid(format!("model: {e}")))?;
                m.to_string()
            }
            None => self.session_defaults().default_model.clone(),
        };
        let fallbacks = self.checked_fallbacks(new.fallbacks.as_deref())?;
        if let Some(parent) = &new.parent_id {
            store
                .session(parent)
                .await
                .map_err(|_| Error::invalid(format!("parent_id {parent:?} is not a session")))?;
        }
        let tools = match &new.tools {
            Some(chosen) => self.tools().check_choice(chosen).map_err(Error::invalid)?,
            None => self.tools().names(),
        };
        let agent_token = random_token();
        let session = store
            .create_session(&NewSession {
                title: &title,
                model: &model,
                parent_id: new.parent_id.as_ref(),
                agent_token_hash: &hex_sha256(&agent_token),
                auto_retry: new.auto_retry.unwrap_or_default(),
                tools: &tools,
                fallbacks: fallbacks.as_deref(),
                approval: new.approval.unwrap_or_default(),
            })
            .await?;
        self.publish(&session.id, Event::Session(session.clone()));
        Ok(CreatedSession {
            session,
            agent_token,
        })
    }

    /// Checks a change of a session's settings and makes it ([`Engine::update_settings`]).
    pub async fn patch_session(
        &self,
        session_id: &SessionId,
        patch: PatchSession,
    ) -> Result<Session> {
        self.store().session(session_id).await?;
        let title = patch.title.as_deref().map(str::trim);
        if let Some(t) = title {
            if t.is_empty() || t.chars().count() > MAX_TITLE_CHARS {
                return Err(Error::invalid(format!(
                    "title must be 1..={MAX_TITLE_CHARS} characters"
                )));
            }
        }
        let tools = match &patch.tools {
            Some(chosen) => Some(self.tools().check_choice(chosen).map_err(Error::invalid)?),
            None => None,
        };
        // Remembered decisions can be forgotten here, never granted: a grant is a decision.
        let tool_grants = match patch.tool_grants {
            Some(kept) => {
                let now = self.store().session(session_id).await?.session.tool_grants;
                if let Some(new) = kept.iter().find(|g| !now.contains(g)) {
                    return Err(Error::invalid(format!(
                        "tool_grants may only remove remembered decisions; {}/{} ({}) is not one \
                         of them: decide a waiting call with allow_always or reject_always instead",
                        new.server, new.tool, new.decision
                    )));
                }
                Some(kept)
            }
            None => None,
        };
        let change = SessionChange {
            title: title.map(str::to_string),
            auto_retry: patch.auto_retry,
            tools,
            fallbacks: self.checked_fallbacks(patch.fallbacks.as_deref())?,
            approval: patch.approval,
            tool_grants,
        };
        self.update_settings(session_id, change).await
    }

    /// A session's own fallback chain, each model checked against the catalogue (kept as
    /// the operator named them).
    fn checked_fallbacks(&self, chain: Option<&[String]>) -> Result<Option<Vec<String>>> {
        let Some(chain) = chain else {
            return Ok(None);
        };
        let names: Vec<String> = chain.iter().map(|n| n.trim().to_string()).collect();
        self.models()
            .catalogue()
            .resolve_chain(&names)
            .map_err(|e| Error::invalid(format!("fallbacks: {e}")))?;
        Ok(Some(names))
    }

    /// Changes what is given and answers the session. Leaving `background` ends the retry
    /// waiting there (the browser takes over, or nothing does). Carried to its end when the
    /// client hangs up, like every command: the change and its announcement go together.
    pub async fn update_settings(
        &self,
        session_id: &SessionId,
        change: SessionChange,
    ) -> Result<Session> {
        let engine = self.clone();
        let session_id = session_id.clone();
        self.runs()
            .carry(async move { engine.settings_changed(&session_id, change).await })
            .await
    }

    async fn settings_changed(
        &self,
        session_id: &SessionId,
        change: SessionChange,
    ) -> Result<Session> {
        self.store().session_exists(session_id).await?;
        let _guard = self.locks().lock(session_id).await?;
        let session = self.store().update_session(session_id, &change).await?;
        if session.auto_retry != AutoRetry::Background
            && self.store().clear_waiting_retry(session_id).await?
        {
            tracing::info!(session_id = %session_id, "the session left background retries: its waiting retry ended");
            metrics().background_retry("cancelled");
        }
        self.publish_session(session_id).await
    }
}
