-- The class of the failure that opened a model's outage (CONTRACT §7): a turn passed over
-- because its model is out fails with it.
ALTER TABLE model_outages ADD COLUMN class TEXT NOT NULL DEFAULT 'overloaded';
