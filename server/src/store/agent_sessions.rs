//! The agent session each Mulligan session runs in on an ACP agent (`agent_sessions` rows,
//! CONTRACT §9), and the last prompt it was sent.
use super::{with_pool, with_writer, Pool, Result, Store};
use crate::clock::now_ms;
use app::wire::{MessageId, SessionId};

/// An agent session as recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentSession {
    pub agent_session: String,
    /// The operator message it was last prompted with.
    pub last_message_id: Option<String>,
}

impl Store {
    /// The agent session recorded for `session` on the agent `provider`.
    pub async fn agent_session(
        &self,
        session: &SessionId,
        provider: &str,
    ) -> Result<Option<AgentSession>> {
        with_pool!(self, |pool| {
            let row: Option<(String, Option<String>)> = sqlx::query_as(
                "SELECT agent_session, last_message_id FROM agent_sessions
                 WHERE session_id = $1 AND provider = $2",
            )
            .bind(session.as_str())
            .bind(provider)
            .fetch_optional(pool)
            .await?;
            Ok(row.map(|(agent_session, last_message_id)| AgentSession {
                agent_session,
                last_message_id,
            }))
        })
    }

    /// Records that `session`'s turns on `provider` run in `agent_session`, last prompted
    /// with `message`.
    pub async fn record_agent_session(
        &self,
        session: &SessionId,
        provider: &str,
        agent_session: &str,
        message: &MessageId,
    ) -> Result<()> {
        with_writer!(self, |pool| {
            sqlx::query(
                "INSERT INTO agent_sessions
                   (session_id, provider, agent_session, last_message_id, updated_at)
                 VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT (session_id, provider) DO UPDATE SET
                   agent_session = excluded.agent_session,
                   last_message_id = excluded.last_message_id,
                   updated_at = excluded.updated_at",
            )
            .bind(session.as_str())
            .bind(provider)
            .bind(agent_session)
            .bind(message.as_str())
            .bind(now_ms())
            .execute(pool)
            .await?;
            Ok(())
        })
    }
}
