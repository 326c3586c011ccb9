-- The operator cancelled Tier 2 for this failed run (POST …/runs/:rid/dismiss-retry): no tab,
-- reload or browser arms it again. Milliseconds since the epoch; NULL while not dismissed.
ALTER TABLE runs ADD COLUMN retry_dismissed_at INTEGER;
