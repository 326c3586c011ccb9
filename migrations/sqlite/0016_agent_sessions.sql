-- The agent session a Mulligan session's turns run in on an ACP agent (CONTRACT §9), so a
-- process started after a restart or a failure reopens it with `session/load`; and the
-- last operator message it was sent (a Regenerate from an earlier one starts a new one).
CREATE TABLE agent_sessions (
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    provider TEXT NOT NULL,
    agent_session TEXT NOT NULL,
    last_message_id TEXT,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (session_id, provider)
);
