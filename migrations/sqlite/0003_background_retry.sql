-- A session's waiting background retry: fires at `retry_fires_at` (NULL: none waiting).
-- `retry_attempt` stays after it fires, so the next failure of that retry counts on.
ALTER TABLE sessions ADD COLUMN retry_attempt INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN retry_fires_at INTEGER;
ALTER TABLE sessions ADD COLUMN retry_reason TEXT;
CREATE INDEX sessions_by_retry ON sessions (retry_fires_at) WHERE retry_fires_at IS NOT NULL;
