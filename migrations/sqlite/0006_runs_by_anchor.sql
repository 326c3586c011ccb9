-- A prompt's runs: Regenerate's staleness check, the history a run sends, supersession.
-- (PostgreSQL has had this index since its first migration.)
CREATE INDEX runs_by_anchor ON runs (anchor_message_id);
