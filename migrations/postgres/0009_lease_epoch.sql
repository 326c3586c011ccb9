-- Lease epochs (fencing): an instance's epoch goes up when another instance takes over its
-- runs after its lease lapsed; a run records the epoch it was started under, and every write
-- of its progress holds only while that (owner, epoch) is still live. An instance that wakes
-- after losing its lease thus writes nothing for the runs it started before.
ALTER TABLE instances ADD COLUMN epoch BIGINT NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN owner_epoch BIGINT;
