-- Which instance executes a run, whether a cancel was asked of it, and how many deltas a
-- streaming reply's stored text holds (so a snapshot and a resumed stream never double one).
ALTER TABLE runs ADD COLUMN owner TEXT;
ALTER TABLE runs ADD COLUMN cancel_requested INTEGER NOT NULL DEFAULT 0;
ALTER TABLE messages ADD COLUMN delta_seq INTEGER NOT NULL DEFAULT 0;
