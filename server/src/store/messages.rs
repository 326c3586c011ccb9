//! Messages: a session's messages, one message, a run's conversation (its history), and
//! the batched saves of streaming replies.
use super::*;
use app::wire::MessageId;
use app::wire::SessionId;

/// One message of a run's conversation, as [`Store::history`] reads it.
#[derive(Clone, Debug, PartialEq)]
pub struct HistoryEntry {
    pub id: MessageId,
    /// The message made tool calls (read them with `tool_calls_of_session`).
    pub has_calls: bool,
    pub role: app::wire::Role,
    pub content: String,
}

impl Store {
    pub async fn messages(
        &self,
        session_id: &SessionId,
        include_superseded: bool,
    ) -> Result<Vec<Message>> {
        with_pool!(self, |pool| {
            let rows = sqlx::query(&format!(
                "SELECT {MESSAGE_COLUMNS} FROM messages m WHERE m.session_id = $1 ORDER BY m.seq"
            ))
            .bind(session_id.as_str())
            .fetch_all(pool)
            .await?;
            Ok(rows
                .iter()
                .map(rows::message)
                .filter(|m| include_superseded || !m.superseded)
                .collect())
        })
    }

    /// The session's reply that is streaming now, if any (as last saved, with its `delta_seq`).
    pub async fn streaming_reply(&self, session_id: &SessionId) -> Result<Option<Message>> {
        with_pool!(self, |pool| {
            let row = sqlx::query(&format!(
                "SELECT {MESSAGE_COLUMNS} FROM messages m
                 WHERE m.session_id = $1 AND m.status = 'streaming' ORDER BY m.seq DESC LIMIT 1"
            ))
            .bind(session_id.as_str())
            .fetch_optional(pool)
            .await?;
            Ok(row.as_ref().map(rows::message))
        })
    }

    pub async fn message(&self, id: &MessageId) -> Result<Message> {
        with_pool!(self, |pool| {
            let row = sqlx::query(&format!(
                "SELECT {MESSAGE_COLUMNS} FROM messages m WHERE m.id = $1"
            ))
            .bind(id.as_str())
            .fetch_optional(pool)
            .await?
            .ok_or_else(|| StoreError::not_found("message", id))?;
            Ok(rows::message(&row))
        })
    }

    /// The conversation a run sends: every visible message up to and including its anchor,
    /// as `(role, content)`; operator prompts that have not run yet and empty or still
    /// streaming replies are left out. One statement.
    pub async fn history(&self, anchor_message_id: &MessageId) -> Result<Vec<HistoryEntry>> {
        with_pool!(self, |pool| {
            let rows: Vec<(String, String, String, bool)> = sqlx::query_as(
                "SELECT m.id, m.role, m.content,
                    EXISTS (SELECT 1 FROM tool_calls t WHERE t.message_id = m.id) AS has_calls
             FROM messages m, messages a
             WHERE a.id = $1 AND m.session_id = a.session_id AND m.seq <= a.seq
               AND NOT EXISTS (SELECT 1 FROM supersessions x WHERE x.message_id = m.id)
               AND CASE WHEN m.role = 'operator' THEN
                     m.id = a.id
                     OR NOT EXISTS (SELECT 1 FROM runs r WHERE r.anchor_message_id = m.id)
                     OR EXISTS (SELECT 1 FROM runs r WHERE r.anchor_message_id = m.id
                                AND r.started_at IS NOT NULL)
                   ELSE COALESCE(m.status, '') <> 'streaming'
                        AND (m.content <> ''
                             OR EXISTS (SELECT 1 FROM tool_calls t WHERE t.message_id = m.id)) END
             ORDER BY m.seq",
            )
            .bind(anchor_message_id.as_str())
            .fetch_all(pool)
            .await?;
            if rows.is_empty() {
                // The anchor itself always belongs: nothing means there is no such message.
                return Err(StoreError::not_found("message", anchor_message_id));
            }
            Ok(rows
                .into_iter()
                .map(|(id, role, content, has_calls)| HistoryEntry {
                    id: MessageId::new(id),
                    has_calls,
                    role: app::wire::Role::parse(&role).unwrap_or(app::wire::Role::Agent),
                    content,
                })
                .collect())
        })
    }

    /// Stores streaming replies' text so far, `(message id, text, delta count)`, in one
    /// transaction (called in batches on a timer, never per delta). A reply that has ended,
    /// or whose stored text is already further on, is left alone; so is, on a shared
    /// database, one whose run's lease is no longer live (fencing).
    pub async fn save_reply_texts(&self, saves: &[(String, String, u64)]) -> Result<()> {
        let sql: &'static str = if self.is_shared() {
            &SAVE_REPLY_TEXT_FENCED
        } else {
            SAVE_REPLY_TEXT
        };
        with_writer!(self, |pool| {
            let mut tx = pool.begin().await?;
            for (id, content, seq) in saves {
                sqlx::query(sql)
                    .bind(self.storable(content))
                    .bind(*seq as i64)
                    .bind(id)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            Ok(())
        })
    }
}

/// A streaming reply's text so far ($1 text, $2 delta count, $3 message).
const SAVE_REPLY_TEXT: &str = "UPDATE messages SET content = $1, delta_seq = $2
     WHERE id = $3 AND status = 'streaming' AND delta_seq < $2";

/// [`SAVE_REPLY_TEXT`] only while the reply's run is `running` under a live lease.
static SAVE_REPLY_TEXT_FENCED: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "{SAVE_REPLY_TEXT} AND EXISTS (SELECT 1 FROM runs r
             WHERE r.id = messages.run_id AND r.status = 'running' AND {})",
        super::shared::lease_live("r")
    )
});
