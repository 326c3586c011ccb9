-- The failed run a session's waiting background retry was scheduled for: it fires only
-- while that run is still the session's last turn. A retry waiting from before this column
-- belongs to the session's last turn then.
ALTER TABLE sessions ADD COLUMN retry_run_id TEXT;
UPDATE sessions SET retry_run_id =
    (SELECT r.id FROM runs r WHERE r.session_id = sessions.id AND r.held_by IS NULL
     ORDER BY r.seq DESC LIMIT 1)
WHERE retry_fires_at IS NOT NULL;
