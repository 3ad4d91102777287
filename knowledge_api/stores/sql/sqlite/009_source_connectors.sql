-- A connector source (a mailbox, a Prometheus server) keeps its kind, URL, settings,
-- the names of the environment variables holding its secrets, its cursor and its last
-- error beside its run, as JSON; '' for the sources `ingest` and uploads fill.
ALTER TABLE sources ADD COLUMN connector TEXT NOT NULL DEFAULT '';
-- Who syncs the source now, and until when (one sync of a source at a time).
ALTER TABLE sources ADD COLUMN lease_holder TEXT NOT NULL DEFAULT '';
ALTER TABLE sources ADD COLUMN lease_until TEXT NOT NULL DEFAULT '';
