-- Mulligan's SQLite schema. Operator message rows are never updated after insert:
-- supersession lives in its own table.
CREATE TABLE sessions (
    id               TEXT PRIMARY KEY,
    title            TEXT NOT NULL,
    model            TEXT NOT NULL,
    parent_id        TEXT REFERENCES sessions(id),
    agent_token_hash TEXT NOT NULL,
    auto_retry       TEXT NOT NULL DEFAULT 'browser',
    tokens_used      INTEGER NOT NULL DEFAULT 0,
    created_at       INTEGER NOT NULL
);

CREATE TABLE messages (
    id                TEXT PRIMARY KEY,
    session_id        TEXT NOT NULL REFERENCES sessions(id),
    seq               INTEGER NOT NULL,
    role              TEXT NOT NULL,
    content           TEXT NOT NULL,
    created_at        INTEGER NOT NULL,
    run_id            TEXT,
    status            TEXT,
    error_message     TEXT,
    retryable         INTEGER,
    retry_class       TEXT,
    retry_after_until INTEGER,
    provenance        TEXT,
    UNIQUE (session_id, seq)
);

CREATE TABLE supersessions (
    message_id TEXT PRIMARY KEY REFERENCES messages(id),
    by_run_id  TEXT NOT NULL,
    at         INTEGER NOT NULL
);

CREATE TABLE runs (
    id                TEXT PRIMARY KEY,
    session_id        TEXT NOT NULL REFERENCES sessions(id),
    seq               INTEGER NOT NULL,
    anchor_message_id TEXT NOT NULL REFERENCES messages(id),
    reply_message_id  TEXT REFERENCES messages(id),
    status            TEXT NOT NULL,
    kind              TEXT NOT NULL,
    attempt           INTEGER NOT NULL DEFAULT 1,
    tier1_attempts    INTEGER NOT NULL DEFAULT 0,
    held_by           TEXT,
    error_message     TEXT,
    retryable         INTEGER,
    retry_class       TEXT,
    retry_after_until INTEGER,
    provenance        TEXT,
    compacted         INTEGER NOT NULL DEFAULT 0,
    tokens_used       INTEGER NOT NULL DEFAULT 0,
    created_at        INTEGER NOT NULL,
    started_at        INTEGER,
    finished_at       INTEGER,
    UNIQUE (session_id, seq)
);
CREATE INDEX runs_by_status ON runs (status);

CREATE TABLE run_attempts (
    run_id      TEXT NOT NULL REFERENCES runs(id),
    n           INTEGER NOT NULL,
    started_at  INTEGER NOT NULL,
    error       TEXT,
    retry_in_ms INTEGER,
    PRIMARY KEY (run_id, n)
);

-- The event log SSE resumes from (written in batches, never per delta).
CREATE TABLE events (
    id         INTEGER PRIMARY KEY,
    session_id TEXT NOT NULL,
    name       TEXT NOT NULL,
    data       TEXT NOT NULL
);
CREATE INDEX events_by_session ON events (session_id, id);
