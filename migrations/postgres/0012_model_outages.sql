-- Parking (CONTRACT §7): one row per model that is out, shared by every instance so one
-- probe serves the fleet; `version` makes each change a compare-and-set. A session's
-- waiting background retry parked behind a model names it in `parked_on`.
CREATE TABLE model_outages (
    model TEXT PRIMARY KEY,
    since BIGINT NOT NULL,
    failures BIGINT NOT NULL,
    next_probe_at BIGINT NOT NULL,
    probe_session TEXT,
    releasing BIGINT NOT NULL DEFAULT 0,
    release_next BIGINT NOT NULL DEFAULT 0,
    version BIGINT NOT NULL DEFAULT 0
);
ALTER TABLE sessions ADD COLUMN parked_on TEXT;
CREATE INDEX sessions_parked_on ON sessions (parked_on) WHERE parked_on IS NOT NULL;
