-- Provider-wide cooldowns: `key` is provider, endpoint, model and the API key's SHA-256;
-- `shown` is the same without the hash's tail (what the API lists and clears).
CREATE TABLE cooldowns (
    key    TEXT PRIMARY KEY,
    shown  TEXT NOT NULL,
    until  INTEGER NOT NULL,
    reason TEXT NOT NULL
);
CREATE INDEX cooldowns_by_shown ON cooldowns (shown);
