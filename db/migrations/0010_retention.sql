-- Trigger records are kept for a while, then pruned (jobs/prune.go): these
-- indexes let the hourly prune find old rows without scanning the tables.
CREATE INDEX schedule_fires_ran_idx ON schedule_fires (ran_at);
CREATE INDEX webhook_deliveries_received_idx ON webhook_deliveries (received_at);
