-- The per-session questions (is a run running, which queued runs are held) by session first:
-- without this the planner scanned every queued/running run of every session.
CREATE INDEX runs_by_session_status ON runs (session_id, status);
