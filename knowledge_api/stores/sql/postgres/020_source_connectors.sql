-- A connector source (a mailbox, a Prometheus server) keeps its kind, URL, settings,
-- the names of the environment variables holding its secrets, its cursor and its last
-- error beside its run, as JSON text; '' for the sources `ingest` and uploads fill.
-- Both functions take or return one more column: dropped and created again (they had
-- no grants or comments).
ALTER TABLE knowledge_sources ADD COLUMN IF NOT EXISTS connector text NOT NULL DEFAULT '';
-- Who syncs the source now, and until when (one sync of a source at a time, across
-- processes and replicas).
ALTER TABLE knowledge_sources ADD COLUMN IF NOT EXISTS lease_holder text NOT NULL DEFAULT '';
ALTER TABLE knowledge_sources ADD COLUMN IF NOT EXISTS lease_until timestamptz
    NOT NULL DEFAULT '-infinity';
\ir functions/knowledge_lease_source.sql

DROP FUNCTION IF EXISTS knowledge_record_source(text, text, text);
\ir functions/knowledge_record_source.sql

DROP FUNCTION IF EXISTS knowledge_list_sources(text);
\ir functions/knowledge_list_sources.sql

NOTIFY pgrst, 'reload schema';
