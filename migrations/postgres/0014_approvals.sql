-- Approval before a tool acts (CONTRACT §8). A session's mode and its remembered
-- ("always") decisions; each call's question and answer and its source's annotations; a
-- run's time spent executing (waiting for a decision is not run time).
ALTER TABLE sessions ADD COLUMN approval TEXT NOT NULL DEFAULT 'policy';
ALTER TABLE sessions ADD COLUMN tool_grants TEXT NOT NULL DEFAULT '[]';
ALTER TABLE tool_calls ADD COLUMN asked_at BIGINT;
ALTER TABLE tool_calls ADD COLUMN decision TEXT;
ALTER TABLE tool_calls ADD COLUMN reason TEXT;
ALTER TABLE tool_calls ADD COLUMN decided_at BIGINT;
ALTER TABLE tool_calls ADD COLUMN decided_by TEXT;
ALTER TABLE tool_calls ADD COLUMN decided_from TEXT;
ALTER TABLE tool_calls ADD COLUMN annotations TEXT;
ALTER TABLE runs ADD COLUMN active_ms BIGINT NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN resumed_at BIGINT;
-- The calls waiting for a decision, oldest first (GET /approvals, the timeout sweep).
CREATE INDEX tool_calls_waiting ON tool_calls (asked_at) WHERE status = 'awaiting_approval';
