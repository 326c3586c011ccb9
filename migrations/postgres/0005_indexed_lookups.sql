-- Indexed lookups instead of scans: a session by its agent token's hash (MCP), the session
-- list's newest-first pages, and runs by the prompt their provenance names (tries and
-- resumes of a prompt), kept in columns of their own.
CREATE INDEX sessions_by_agent_token ON sessions (agent_token_hash);
CREATE INDEX sessions_by_created ON sessions (created_at, id);
ALTER TABLE runs ADD COLUMN prompt_id TEXT, ADD COLUMN provenance_kind TEXT;
UPDATE runs SET prompt_id = provenance::jsonb ->> 'prompt_id',
                provenance_kind = provenance::jsonb ->> 'kind'
WHERE provenance IS NOT NULL;
CREATE INDEX runs_by_prompt ON runs (prompt_id);
