-- Lease epochs, as on PostgreSQL, so both backends run the same statements. One instance on
-- SQLite writes no heartbeat: the table stays empty and every run's epoch is 0.
CREATE TABLE IF NOT EXISTS instances (
    id      TEXT PRIMARY KEY,
    seen_at INTEGER NOT NULL,
    epoch   INTEGER NOT NULL DEFAULT 0
);
ALTER TABLE runs ADD COLUMN owner_epoch INTEGER;
