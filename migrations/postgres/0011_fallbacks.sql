-- Providers, plural (CONTRACT §7): a session's own fallback chain (a JSON array of
-- `<provider>/<model>`, NULL: the catalogue's), which model answered each step of a run (a
-- JSON array of `Served`), and the model each Tier 1 attempt asked.
ALTER TABLE sessions ADD COLUMN fallbacks TEXT;
ALTER TABLE runs ADD COLUMN served TEXT;
ALTER TABLE run_attempts ADD COLUMN model TEXT;
