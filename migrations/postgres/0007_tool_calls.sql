-- Agent turns (CONTRACT §6): each tool call a model step asked for, recorded when it starts
-- and again when it ends, before the next model step; a call still `running` with no task
-- behind it is `interrupted`. `text_offset` is how many bytes of the reply's text came
-- before the call, which is how the reply's parts are put back in order.
CREATE TABLE tool_calls (
    id           TEXT PRIMARY KEY,
    run_id       TEXT NOT NULL REFERENCES runs(id),
    message_id   TEXT NOT NULL REFERENCES messages(id),
    session_id   TEXT NOT NULL REFERENCES sessions(id),
    step         BIGINT NOT NULL,
    ord          BIGINT NOT NULL,
    provider_id  TEXT NOT NULL,
    server       TEXT NOT NULL,
    tool         TEXT NOT NULL,
    arguments    TEXT NOT NULL,
    text_offset  BIGINT NOT NULL,
    status       TEXT NOT NULL,
    result       TEXT,
    reached      BIGINT NOT NULL DEFAULT 0,
    started_at   BIGINT NOT NULL,
    finished_at  BIGINT,
    UNIQUE (message_id, ord)
);
CREATE INDEX tool_calls_by_session ON tool_calls (session_id);
CREATE INDEX tool_calls_by_run ON tool_calls (run_id);

-- Model steps begun, and tool calls that reached a tool server, per run.
ALTER TABLE runs ADD COLUMN steps BIGINT NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN tools_executed BIGINT NOT NULL DEFAULT 0;

-- A session's tool sources, as a JSON array of names; NULL: every configured source.
ALTER TABLE sessions ADD COLUMN tools TEXT;
