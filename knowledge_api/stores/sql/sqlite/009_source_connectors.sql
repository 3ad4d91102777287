-- A connector source (a mailbox, a Prometheus server) keeps its kind, URL, settings,
-- the names of the environment variables holding its secrets, its cursor and its last
-- error beside its run, as JSON; '' for the sources `ingest` and uploads fill.
ALTER TABLE sources ADD COLUMN connector TEXT NOT NULL DEFAULT '';
