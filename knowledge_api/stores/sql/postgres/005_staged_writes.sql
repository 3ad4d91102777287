-- Writes go through staging tables: the postgres store fills them with COPY, the
-- supabase store (through knowledge_index_documents) from its JSON body, and one
-- function moves what they hold into the tables. Both ways store the same rows.

-- The staging tables of the current transaction (temporary, dropped at its end).
-- Replaced in 011_sources: the current text is functions/knowledge_stage_documents.sql.
CREATE FUNCTION knowledge_stage_documents() RETURNS void
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
        content_hash text NOT NULL
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

-- Insert or replace the staged documents with all their passages, then empty the
-- staging tables: the documents, the passages written.
-- Replaced in 011_sources: the current text is functions/knowledge_index_staged.sql.
CREATE FUNCTION knowledge_index_staged()
RETURNS TABLE (documents integer, passages integer)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    -- writers queue here first, so two of them never wait on each other's rows
    PERFORM 1 FROM knowledge_store_state FOR UPDATE;

    INSERT INTO knowledge_documents AS k (id, collection, source_type, source_id, title,
        content, metadata, organization, division, app_under_test, content_hash)
    SELECT d.id, d.collection, d.source_type, d.source_id, d.title, d.content, d.metadata,
           knowledge_text_field(d.metadata, 'organization'),
           knowledge_text_field(d.metadata, 'division'),
           knowledge_text_field(d.metadata, 'app_under_test'), d.content_hash
    FROM knowledge_staged_documents d
    ON CONFLICT (id) DO UPDATE SET title = excluded.title, content = excluded.content,
        metadata = excluded.metadata, organization = excluded.organization,
        division = excluded.division, app_under_test = excluded.app_under_test,
        content_hash = excluded.content_hash, updated_at = now();

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

-- The JSON way in (PostgREST): each element {id, collection, source_type, source_id,
-- title, content, metadata, content_hash, chunks: [{id, chunk_index, chunk_count, title,
-- section, content, content_hash, embedding}]}, staged, then written like a COPY.
-- Replaced in 011_sources: the current text is functions/knowledge_stage_json.sql.
CREATE FUNCTION knowledge_stage_json(staged jsonb) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM knowledge_stage_documents();
    INSERT INTO knowledge_staged_documents
    SELECT d.id, d.collection, d.source_type, d.source_id, d.title, d.content, d.metadata,
           d.content_hash
    FROM jsonb_to_recordset(staged) AS d(id uuid, collection text, source_type text,
        source_id text, title text, content text, metadata jsonb, content_hash text);
    INSERT INTO knowledge_staged_passages
    SELECT c.id, d.id, c.chunk_index, c.chunk_count, c.title, c.section, c.content,
           c.content_hash, c.embedding
    FROM jsonb_to_recordset(staged) AS d(id uuid, chunks jsonb),
        jsonb_to_recordset(d.chunks) AS c(id uuid, chunk_index integer, chunk_count integer,
        title text, section text, content text, content_hash text, embedding vector);
END
$$;

-- Insert or replace documents with all their passages in one transaction.
\ir functions/knowledge_index_documents.sql

-- Passages by cosine similarity, as before, with the HNSW candidates (hnsw.ef_search)
-- chosen by the caller: the function's own setting ends with the call.
DROP FUNCTION match_siam_vectors_gemini(vector, double precision, integer, text[], text, text,
    text, jsonb, text);
-- Replaced in 013_filter_language: the current text is functions/match_siam_vectors_gemini.sql.
CREATE FUNCTION match_siam_vectors_gemini(
    query_embedding vector,
    match_threshold double precision DEFAULT 0.2,
    match_count integer DEFAULT 5,
    filter_source_types text[] DEFAULT NULL,
    filter_organization text DEFAULT NULL,
    filter_division text DEFAULT NULL,
    filter_app_under_test text DEFAULT NULL,
    filter_metadata jsonb DEFAULT '{}',
    filter_collection text DEFAULT 'default',
    ef_search integer DEFAULT 100
) RETURNS TABLE (
    id uuid,
    document_id uuid,
    content text,
    source_type text,
    source_id text,
    metadata jsonb,
    similarity double precision,
    organization text,
    division text,
    app_under_test text,
    title text,
    section text,
    chunk_index integer,
    chunk_count integer
)
LANGUAGE plpgsql STABLE
SET hnsw.ef_search = 100
SET hnsw.iterative_scan = strict_order
SET plan_cache_mode = force_custom_plan
AS $$
#variable_conflict use_column
BEGIN
    PERFORM set_config('hnsw.ef_search', ef_search::text, true);
    RETURN QUERY
    SELECT nearest.id, nearest.document_id, nearest.content, nearest.source_type,
           nearest.source_id, nearest.metadata, 1 - nearest.distance, nearest.organization,
           nearest.division, nearest.app_under_test, nearest.title, nearest.section,
           nearest.chunk_index, nearest.chunk_count
    FROM (
        SELECT v.id, v.document_id, v.content, v.source_type, v.source_id, v.metadata,
               v.embedding <=> query_embedding AS distance, v.organization, v.division,
               v.app_under_test, v.title, v.section, v.chunk_index, v.chunk_count
        FROM siam_vectors v
        WHERE v.collection = filter_collection
          AND (filter_source_types IS NULL OR v.source_type = ANY (filter_source_types))
          AND (filter_organization IS NULL OR v.organization = filter_organization)
          AND (filter_division IS NULL OR v.division = filter_division)
          AND (filter_app_under_test IS NULL OR v.app_under_test = filter_app_under_test)
          AND (filter_metadata = '{}' OR v.metadata @> filter_metadata)
        ORDER BY v.embedding <=> query_embedding
        LIMIT match_count
    ) nearest
    WHERE 1 - nearest.distance > match_threshold
    ORDER BY nearest.distance;
END
$$;

NOTIFY pgrst, 'reload schema';
