-- Session locks as rows, taken and released by single statements: a lock pins no
-- connection while it is held or waited for, and one whose holder died lapses at
-- `expires_at` (the database's clock, ms since the epoch; holders renew it).
CREATE TABLE session_locks (
    session_id TEXT PRIMARY KEY,
    holder     TEXT NOT NULL,
    expires_at BIGINT NOT NULL
);
