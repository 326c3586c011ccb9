-- Why an agent ended a completed turn when it was not simply done (CONTRACT §9): max_tokens,
-- max_turn_requests, refusal, or a newer word an agent sent. NULL for every other run.
ALTER TABLE runs ADD COLUMN stop_reason TEXT;
