-- Mulligan's PostgreSQL schema: the SQLite schema's tables with PostgreSQL types, plus the
-- instances that share the database (their heartbeats are the leases on the runs they execute).
-- Operator message rows are never updated after insert: supersession lives in its own table.
CREATE TABLE sessions (
    id               TEXT PRIMARY KEY,
    title            TEXT NOT NULL,
    model            TEXT NOT NULL,
    parent_id        TEXT REFERENCES sessions(id),
    agent_token_hash TEXT NOT NULL,
    auto_retry       TEXT NOT NULL DEFAULT 'browser',
    tokens_used      BIGINT NOT NULL DEFAULT 0,
    created_at       BIGINT NOT NULL
);

CREATE TABLE messages (
    id                TEXT PRIMARY KEY,
    session_id        TEXT NOT NULL REFERENCES sessions(id),
    seq               BIGINT NOT NULL,
    role              TEXT NOT NULL,
    content           TEXT NOT NULL,
    created_at        BIGINT NOT NULL,
    run_id            TEXT,
    status            TEXT,
    error_message     TEXT,
    retryable         BOOLEAN,
    retry_class       TEXT,
    retry_after_until BIGINT,
    provenance        TEXT,
    delta_seq         BIGINT NOT NULL DEFAULT 0,
    UNIQUE (session_id, seq)
);

CREATE TABLE supersessions (
    message_id TEXT PRIMARY KEY REFERENCES messages(id),
    by_run_id  TEXT NOT NULL,
    at         BIGINT NOT NULL
);

CREATE TABLE runs (
    id                TEXT PRIMARY KEY,
    session_id        TEXT NOT NULL REFERENCES sessions(id),
    seq               BIGINT NOT NULL,
    anchor_message_id TEXT NOT NULL REFERENCES messages(id),
    reply_message_id  TEXT REFERENCES messages(id),
    status            TEXT NOT NULL,
    kind              TEXT NOT NULL,
    attempt           BIGINT NOT NULL DEFAULT 1,
    tier1_attempts    BIGINT NOT NULL DEFAULT 0,
    held_by           TEXT,
    error_message     TEXT,
    retryable         BOOLEAN,
    retry_class       TEXT,
    retry_after_until BIGINT,
    provenance        TEXT,
    compacted         BOOLEAN NOT NULL DEFAULT FALSE,
    tokens_used       BIGINT NOT NULL DEFAULT 0,
    created_at        BIGINT NOT NULL,
    started_at        BIGINT,
    finished_at       BIGINT,
    owner             TEXT,
    cancel_requested  BOOLEAN NOT NULL DEFAULT FALSE,
    UNIQUE (session_id, seq)
);
CREATE INDEX runs_by_status ON runs (status);
CREATE INDEX runs_by_anchor ON runs (anchor_message_id);

CREATE TABLE run_attempts (
    run_id      TEXT NOT NULL REFERENCES runs(id),
    n           BIGINT NOT NULL,
    started_at  BIGINT NOT NULL,
    error       TEXT,
    retry_in_ms BIGINT,
    PRIMARY KEY (run_id, n)
);

-- The event log every instance follows. Writers take one advisory lock per batch, so ids
-- commit in order and a follower reading `id > last` never skips one committed later.
CREATE TABLE events (
    id         BIGSERIAL PRIMARY KEY,
    session_id TEXT NOT NULL,
    name       TEXT NOT NULL,
    data       TEXT NOT NULL
);
CREATE INDEX events_by_session ON events (session_id, id);

-- Instances sharing this database; `seen_at` is their heartbeat.
CREATE TABLE instances (
    id      TEXT PRIMARY KEY,
    seen_at BIGINT NOT NULL
);
