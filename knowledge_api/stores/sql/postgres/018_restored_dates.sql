-- A restore keeps each document's dates: a document staged with its created_at and
-- updated_at (read from another store or an export file) is stored with them, instead of
-- the time of the write. Listings show created_at beside updated_at (a new RETURNS
-- TABLE: the function is dropped and created again; it had no grants or comments).
-- Replaced in 022_chunk_offsets: the current text is functions/knowledge_stage_documents.sql.
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
        source text NOT NULL DEFAULT '',
        created_at timestamptz,
        updated_at timestamptz
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

-- Replaced in 022_chunk_offsets: the current text is functions/knowledge_stage_json.sql.
CREATE OR REPLACE FUNCTION knowledge_stage_json(staged jsonb) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM knowledge_stage_documents();
    INSERT INTO knowledge_staged_documents
    SELECT d.id, d.collection, d.source_type, d.source_id, d.title, d.content, d.metadata,
           d.content_hash, coalesce(d.source, ''), d.created_at, d.updated_at
    FROM jsonb_to_recordset(staged) AS d(id uuid, collection text, source_type text,
        source_id text, title text, content text, metadata jsonb, content_hash text,
        source text, created_at timestamptz, updated_at timestamptz);
    INSERT INTO knowledge_staged_passages
    SELECT c.id, d.id, c.chunk_index, c.chunk_count, c.title, c.section, c.content,
           c.content_hash, c.embedding
    FROM jsonb_to_recordset(staged) AS d(id uuid, chunks jsonb),
        jsonb_to_recordset(d.chunks) AS c(id uuid, chunk_index integer, chunk_count integer,
        title text, section text, content text, content_hash text, embedding vector);
END
$$;

-- Replaced in 022_chunk_offsets: the current text is functions/knowledge_index_staged.sql.
CREATE OR REPLACE FUNCTION knowledge_index_staged()
RETURNS TABLE (documents integer, passages integer)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    -- writers queue here first, so two of them never wait on each other's rows
    PERFORM 1 FROM knowledge_store_state FOR UPDATE;

    -- a document staged with its dates (read from a store or an export) keeps them;
    -- another is updated now, and created now when it is new
    INSERT INTO knowledge_documents AS k (id, collection, source_type, source_id, title,
        content, metadata, organization, division, app_under_test, content_hash, source,
        created_at, updated_at)
    SELECT d.id, d.collection, d.source_type, d.source_id, d.title, d.content, d.metadata,
           knowledge_text_field(d.metadata, 'organization'),
           knowledge_text_field(d.metadata, 'division'),
           knowledge_text_field(d.metadata, 'app_under_test'), d.content_hash, d.source,
           coalesce(d.created_at, now()), coalesce(d.updated_at, now())
    FROM knowledge_staged_documents d
    ON CONFLICT (id) DO UPDATE SET title = excluded.title, content = excluded.content,
        metadata = excluded.metadata, organization = excluded.organization,
        division = excluded.division, app_under_test = excluded.app_under_test,
        content_hash = excluded.content_hash, source = excluded.source,
        created_at = coalesce((SELECT s.created_at FROM knowledge_staged_documents s
                               WHERE s.id = excluded.id), k.created_at),
        updated_at = excluded.updated_at;

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

DROP FUNCTION knowledge_list_documents(text, uuid, text, text, integer);
\ir functions/knowledge_list_documents.sql

NOTIFY pgrst, 'reload schema';
