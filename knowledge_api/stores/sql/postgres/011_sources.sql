-- Sources: each document records the source that produced it (an ingested path, a KB
-- host, an upload; '' for one indexed on its own), and each source when it last ran, so
-- that mirroring a source finds the documents it no longer produces.
ALTER TABLE knowledge_documents ADD COLUMN source text NOT NULL DEFAULT '';
CREATE INDEX knowledge_documents_source ON knowledge_documents (collection, source, id);
-- listings page through a collection in id order
CREATE INDEX knowledge_documents_listing ON knowledge_documents (collection, id);

CREATE TABLE knowledge_sources (
    collection text NOT NULL,
    name text NOT NULL,
    last_run timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (collection, name)
);
ALTER TABLE knowledge_sources ENABLE ROW LEVEL SECURITY;

-- The staged documents carry their source.
\ir functions/knowledge_stage_documents.sql

\ir functions/knowledge_stage_json.sql

\ir functions/knowledge_index_staged.sql

-- Note that a source ran now. (Two columns: PostgREST answers a one-column table as
-- bare values.)
CREATE OR REPLACE FUNCTION knowledge_record_source(source_collection text, source_name text)
RETURNS TABLE (name text, last_run timestamptz)
LANGUAGE sql AS $$
    INSERT INTO knowledge_sources AS s (collection, name) VALUES (source_collection, source_name)
    ON CONFLICT (collection, name) DO UPDATE SET last_run = now()
    RETURNING s.name, s.last_run
$$;

-- Delete every document of a source (their passages and pages go with them), and the
-- source: how many documents went.
\ir functions/knowledge_delete_source.sql

-- The sources (of one collection, or all) with their documents counted.
CREATE OR REPLACE FUNCTION knowledge_list_sources(source_collection text DEFAULT NULL)
RETURNS TABLE (collection text, name text, documents bigint, last_run timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT s.collection, s.name,
           (SELECT count(*) FROM knowledge_documents d
            WHERE d.collection = s.collection AND d.source = s.name),
           s.last_run
    FROM knowledge_sources s
    WHERE source_collection IS NULL OR s.collection = source_collection
    ORDER BY s.collection, s.name
$$;

-- One page of a collection's documents in id order (keyset: ids after `after_id`),
-- without their text; each with its passages counted.
\ir functions/knowledge_list_documents.sql

-- Every collection holding documents or sources: documents, passages, sources, last update.
\ir functions/knowledge_collection_stats.sql

NOTIFY pgrst, 'reload schema';
