-- A document's id names the source that produced it (models.document_id): two sources
-- holding the same relative path (two repositories' README.md) keep a document each, so
-- the rule of one document per source id goes. Ids changed by the step that follows
-- this migration (schema.py: the documents of a source take their new ids, and their
-- passages the ids that follow) reach the passages and pages by ON UPDATE CASCADE; no
-- vector is computed again. Documents of no source keep their ids.
ALTER TABLE knowledge_documents
    DROP CONSTRAINT IF EXISTS knowledge_documents_collection_source_type_source_id_key;
-- a document is found by its source id (one per source)
CREATE INDEX IF NOT EXISTS knowledge_documents_source_id
    ON knowledge_documents (collection, source_type, source_id);
ALTER TABLE siam_vectors DROP CONSTRAINT siam_vectors_document_id_fkey,
    ADD CONSTRAINT siam_vectors_document_id_fkey FOREIGN KEY (document_id)
        REFERENCES knowledge_documents (id) ON DELETE CASCADE ON UPDATE CASCADE;
ALTER TABLE wiki_documents DROP CONSTRAINT wiki_documents_id_fkey,
    ADD CONSTRAINT wiki_documents_id_fkey FOREIGN KEY (id)
        REFERENCES knowledge_documents (id) ON DELETE CASCADE ON UPDATE CASCADE;

-- Every document a source id names, one per source.
\ir functions/knowledge_find_document.sql

-- Where a source reads its files (a folder or a base URL): another source reading one
-- of them is refused.
ALTER TABLE knowledge_sources ADD COLUMN IF NOT EXISTS root text NOT NULL DEFAULT '';
DROP FUNCTION IF EXISTS knowledge_record_source(text, text);
-- Replaced in 020_source_connectors: the current text is functions/knowledge_record_source.sql.
CREATE OR REPLACE FUNCTION knowledge_record_source(
    source_collection text, source_name text, source_root text DEFAULT ''
)
RETURNS TABLE (name text, last_run timestamptz)
LANGUAGE sql AS $$
    INSERT INTO knowledge_sources AS s (collection, name, root)
    VALUES (source_collection, source_name, source_root)
    ON CONFLICT (collection, name) DO UPDATE SET last_run = now(),
        root = CASE excluded.root WHEN '' THEN s.root ELSE excluded.root END
    RETURNING s.name, s.last_run
$$;
DROP FUNCTION IF EXISTS knowledge_list_sources(text);
-- Replaced in 020_source_connectors: the current text is functions/knowledge_list_sources.sql.
CREATE OR REPLACE FUNCTION knowledge_list_sources(source_collection text DEFAULT NULL)
RETURNS TABLE (collection text, name text, documents bigint, last_run timestamptz, root text)
LANGUAGE sql STABLE AS $$
    SELECT s.collection, s.name,
           (SELECT count(*) FROM knowledge_documents d
            WHERE d.collection = s.collection AND d.source = s.name),
           s.last_run, s.root
    FROM knowledge_sources s
    WHERE source_collection IS NULL OR s.collection = source_collection
    ORDER BY s.collection, s.name
$$;

NOTIFY pgrst, 'reload schema';
