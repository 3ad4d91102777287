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
-- Replaced in 017_restored_dates: the current text is functions/knowledge_stage_documents.sql.
CREATE OR REPLACE FUNCTION knowledge_stage_documents() RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    CREATE TEMP TABLE IF NOT EXISTS knowledge_staged_documents (
        id uuid NOT NULL,
        collection text NOT NULL,
        source_type text NOT NULL,
        source_id text NOT NULL,
        title text NOT NULL,
        content text NOT NULL,
        metadata jsonb NOT NULL,
        content_hash text NOT NULL,
        source text NOT NULL DEFAULT ''
    ) ON COMMIT DROP;
    CREATE TEMP TABLE IF NOT EXISTS knowledge_staged_passages (
        id uuid NOT NULL,
        document_id uuid NOT NULL,
        chunk_index integer NOT NULL,
        chunk_count integer NOT NULL,
        title text NOT NULL,
        section text NOT NULL,
        content text NOT NULL,
        content_hash text NOT NULL,
        embedding vector NOT NULL
    ) ON COMMIT DROP;
END
$$;

-- Replaced in 017_restored_dates: the current text is functions/knowledge_stage_json.sql.
CREATE OR REPLACE FUNCTION knowledge_stage_json(staged jsonb) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM knowledge_stage_documents();
    INSERT INTO knowledge_staged_documents
    SELECT d.id, d.collection, d.source_type, d.source_id, d.title, d.content, d.metadata,
           d.content_hash, coalesce(d.source, '')
    FROM jsonb_to_recordset(staged) AS d(id uuid, collection text, source_type text,
        source_id text, title text, content text, metadata jsonb, content_hash text,
        source text);
    INSERT INTO knowledge_staged_passages
    SELECT c.id, d.id, c.chunk_index, c.chunk_count, c.title, c.section, c.content,
           c.content_hash, c.embedding
    FROM jsonb_to_recordset(staged) AS d(id uuid, chunks jsonb),
        jsonb_to_recordset(d.chunks) AS c(id uuid, chunk_index integer, chunk_count integer,
        title text, section text, content text, content_hash text, embedding vector);
END
$$;

-- Replaced in 017_restored_dates: the current text is functions/knowledge_index_staged.sql.
CREATE OR REPLACE FUNCTION knowledge_index_staged()
RETURNS TABLE (documents integer, passages integer)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    -- writers queue here first, so two of them never wait on each other's rows
    PERFORM 1 FROM knowledge_store_state FOR UPDATE;

    INSERT INTO knowledge_documents AS k (id, collection, source_type, source_id, title,
        content, metadata, organization, division, app_under_test, content_hash, source)
    SELECT d.id, d.collection, d.source_type, d.source_id, d.title, d.content, d.metadata,
           knowledge_text_field(d.metadata, 'organization'),
           knowledge_text_field(d.metadata, 'division'),
           knowledge_text_field(d.metadata, 'app_under_test'), d.content_hash, d.source
    FROM knowledge_staged_documents d
    ON CONFLICT (id) DO UPDATE SET title = excluded.title, content = excluded.content,
        metadata = excluded.metadata, organization = excluded.organization,
        division = excluded.division, app_under_test = excluded.app_under_test,
        content_hash = excluded.content_hash, source = excluded.source, updated_at = now();

    DELETE FROM siam_vectors v USING knowledge_staged_documents d WHERE v.document_id = d.id;

    INSERT INTO siam_vectors (id, document_id, collection, organization, division,
        app_under_test, source_type, source_id, title, section, chunk_index, chunk_count,
        content, content_hash, embedding, metadata)
    SELECT c.id, d.id, d.collection, knowledge_text_field(d.metadata, 'organization'),
           knowledge_text_field(d.metadata, 'division'),
           knowledge_text_field(d.metadata, 'app_under_test'), d.source_type, d.source_id,
           c.title, c.section, c.chunk_index, c.chunk_count, c.content, c.content_hash,
           c.embedding, d.metadata
    FROM knowledge_staged_passages c JOIN knowledge_staged_documents d ON d.id = c.document_id;

    INSERT INTO wiki_documents AS w (id, title, markdown_content, url, app_name, embedding)
    SELECT d.id, d.title, d.content, d.source_id,
           knowledge_text_field(d.metadata, 'app_under_test'), page.embedding
    FROM knowledge_staged_documents d
    LEFT JOIN (SELECT c.document_id, l2_normalize(avg(c.embedding)) AS embedding
               FROM knowledge_staged_passages c
               WHERE c.document_id IN (SELECT s.id FROM knowledge_staged_documents s
                                       WHERE s.source_type = 'wiki')
               GROUP BY c.document_id) page
           ON page.document_id = d.id
    WHERE d.source_type = 'wiki'
    ON CONFLICT (id) DO UPDATE SET title = excluded.title,
        markdown_content = excluded.markdown_content, url = excluded.url,
        app_name = excluded.app_name, embedding = excluded.embedding, updated_at = now();

    RETURN QUERY
    SELECT (SELECT count(*)::integer FROM knowledge_staged_documents),
           (SELECT count(*)::integer FROM knowledge_staged_passages);
    TRUNCATE knowledge_staged_documents, knowledge_staged_passages;
END
$$;

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
-- Replaced in 017_restored_dates: the current text is functions/knowledge_list_documents.sql.
CREATE OR REPLACE FUNCTION knowledge_list_documents(
    list_collection text,
    after_id uuid DEFAULT NULL,
    list_source_type text DEFAULT NULL,
    list_source text DEFAULT NULL,
    list_limit integer DEFAULT 100
) RETURNS TABLE (id uuid, collection text, source_type text, source_id text, source text,
    title text, metadata jsonb, updated_at timestamptz, chunks bigint)
LANGUAGE sql STABLE AS $$
    SELECT d.id, d.collection, d.source_type, d.source_id, d.source, d.title, d.metadata,
           d.updated_at,
           (SELECT count(*) FROM siam_vectors v WHERE v.document_id = d.id)
    FROM knowledge_documents d
    WHERE d.collection = list_collection
      -- a range of the listing index whatever the plan: an `IS NULL OR` here would make
      -- a generic plan scan the collection from its first id for every page
      AND d.id > coalesce(after_id, '00000000-0000-0000-0000-000000000000')
      AND (list_source_type IS NULL OR d.source_type = list_source_type)
      AND (list_source IS NULL OR d.source = list_source)
    ORDER BY d.id
    LIMIT list_limit
$$;

-- Every collection holding documents or sources: documents, passages, sources, last update.
\ir functions/knowledge_collection_stats.sql

NOTIFY pgrst, 'reload schema';
