-- The functions both backends call: `postgres` in SQL, `supabase` as PostgREST RPCs.
-- Each returns rows of named columns, so both callers read the same JSON-like rows.

-- Any of the query's words (stemmed, stop words dropped): an OR of lexemes.
\ir functions/knowledge_any_terms.sql

-- An ILIKE pattern matching the query text literally anywhere.
\ir functions/knowledge_like_pattern.sql

-- A metadata value as a tenancy column: only strings qualify.
\ir functions/knowledge_text_field.sql

\ir functions/knowledge_try_uuid.sql

-- Passages by cosine similarity (1 - cosine distance), best first, above the threshold.
-- The nearest match_count are found first and cut by the threshold after: the same rows
-- (the threshold keeps a prefix of that order), but the index serves the ORDER BY. The
-- HNSW scan keeps 100 candidates (the backends ask for 50) and is iterative, so filters
-- never starve the result of rows; plans are made for the actual arguments, so an
-- unused filter costs nothing.
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
    filter_collection text DEFAULT 'default'
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
LANGUAGE sql STABLE
SET hnsw.ef_search = 100
SET hnsw.iterative_scan = strict_order
SET plan_cache_mode = force_custom_plan
AS $$
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
    ORDER BY nearest.distance
$$;

-- Passages by full-text rank (any query word counts); a literal ILIKE match is the
-- last resort when full text finds nothing (symbols, stop words, fragments).
-- Replaced in 013_filter_language: the current text is functions/search_siam_vectors_text.sql.
CREATE FUNCTION search_siam_vectors_text(
    query_text text,
    match_count integer DEFAULT 5,
    filter_source_types text[] DEFAULT NULL,
    filter_organization text DEFAULT NULL,
    filter_division text DEFAULT NULL,
    filter_app_under_test text DEFAULT NULL,
    filter_metadata jsonb DEFAULT '{}',
    filter_collection text DEFAULT 'default'
) RETURNS TABLE (
    id uuid,
    document_id uuid,
    content text,
    source_type text,
    source_id text,
    metadata jsonb,
    rank double precision,
    organization text,
    division text,
    app_under_test text,
    title text,
    section text,
    chunk_index integer,
    chunk_count integer
)
LANGUAGE plpgsql STABLE AS $$
DECLARE
    terms tsquery := knowledge_any_terms(query_text);
BEGIN
    IF btrim(query_text) = '' THEN
        RETURN;
    END IF;
    IF numnode(terms) > 0 THEN
        RETURN QUERY
        SELECT v.id, v.document_id, v.content, v.source_type, v.source_id, v.metadata,
               ts_rank(v.fts, terms)::double precision AS rank, v.organization, v.division,
               v.app_under_test, v.title, v.section, v.chunk_index, v.chunk_count
        FROM siam_vectors v
        WHERE v.fts @@ terms
          AND v.collection = filter_collection
          AND (filter_source_types IS NULL OR v.source_type = ANY (filter_source_types))
          AND (filter_organization IS NULL OR v.organization = filter_organization)
          AND (filter_division IS NULL OR v.division = filter_division)
          AND (filter_app_under_test IS NULL OR v.app_under_test = filter_app_under_test)
          AND (filter_metadata = '{}' OR v.metadata @> filter_metadata)
        ORDER BY 7 DESC, v.id
        LIMIT match_count;
        IF FOUND THEN
            RETURN;
        END IF;
    END IF;
    RETURN QUERY
    SELECT v.id, v.document_id, v.content, v.source_type, v.source_id, v.metadata,
           (CASE WHEN v.title ILIKE knowledge_like_pattern(query_text) THEN 0.002 ELSE 0.001 END)::double precision,
           v.organization, v.division, v.app_under_test, v.title, v.section, v.chunk_index,
           v.chunk_count
    FROM siam_vectors v
    WHERE (v.content ILIKE knowledge_like_pattern(query_text)
           OR v.title ILIKE knowledge_like_pattern(query_text))
      AND v.collection = filter_collection
      AND (filter_source_types IS NULL OR v.source_type = ANY (filter_source_types))
      AND (filter_organization IS NULL OR v.organization = filter_organization)
      AND (filter_division IS NULL OR v.division = filter_division)
      AND (filter_app_under_test IS NULL OR v.app_under_test = filter_app_under_test)
      AND (filter_metadata = '{}' OR v.metadata @> filter_metadata)
    ORDER BY 7 DESC, v.id
    LIMIT match_count;
END;
$$;

-- Wiki pages by keyword (the text search of the wiki): full-text rank over title and
-- markdown, ILIKE as the last resort.
\ir functions/search_wiki_documents.sql

-- Wiki pages by meaning: the cosine similarity of the query and the page's vector.
\ir functions/match_wiki_documents.sql

-- The cosine similarity of given passages to the query (for keyword-only hits).
\ir functions/knowledge_chunk_similarities.sql

-- Insert or replace documents with all their passages in one transaction. Each
-- element: {id, collection, source_type, source_id, title, content, metadata,
-- content_hash, chunks: [{id, chunk_index, chunk_count, title, section, content,
-- content_hash, embedding}]}.
-- Replaced in 005_staged_writes: the current text is functions/knowledge_index_documents.sql.
CREATE FUNCTION knowledge_index_documents(documents jsonb)
RETURNS TABLE (documents integer, passages integer)
LANGUAGE sql AS $$
    -- writers queue here first, so two of them never wait on each other's rows
    SELECT 1 FROM knowledge_store_state FOR UPDATE;

    INSERT INTO knowledge_documents AS k (id, collection, source_type, source_id, title,
        content, metadata, organization, division, app_under_test, content_hash)
    SELECT d.id, d.collection, d.source_type, d.source_id, d.title, d.content, d.metadata,
           knowledge_text_field(d.metadata, 'organization'),
           knowledge_text_field(d.metadata, 'division'),
           knowledge_text_field(d.metadata, 'app_under_test'), d.content_hash
    FROM jsonb_to_recordset(documents) AS d(id uuid, collection text, source_type text,
        source_id text, title text, content text, metadata jsonb, content_hash text)
    ON CONFLICT (id) DO UPDATE SET title = excluded.title, content = excluded.content,
        metadata = excluded.metadata, organization = excluded.organization,
        division = excluded.division, app_under_test = excluded.app_under_test,
        content_hash = excluded.content_hash, updated_at = now();

    DELETE FROM siam_vectors
    WHERE document_id IN (SELECT (d ->> 'id')::uuid FROM jsonb_array_elements(documents) d);

    INSERT INTO siam_vectors (id, document_id, collection, organization, division,
        app_under_test, source_type, source_id, title, section, chunk_index, chunk_count,
        content, content_hash, embedding, metadata)
    SELECT c.id, d.id, d.collection, knowledge_text_field(d.metadata, 'organization'),
           knowledge_text_field(d.metadata, 'division'),
           knowledge_text_field(d.metadata, 'app_under_test'), d.source_type, d.source_id,
           c.title, c.section, c.chunk_index, c.chunk_count, c.content, c.content_hash,
           c.embedding, d.metadata
    FROM jsonb_to_recordset(documents) AS d(id uuid, collection text, source_type text,
        source_id text, metadata jsonb, chunks jsonb),
        jsonb_to_recordset(d.chunks) AS c(id uuid, chunk_index integer, chunk_count integer,
        title text, section text, content text, content_hash text, embedding vector);

    INSERT INTO wiki_documents AS w (id, title, markdown_content, url, app_name, embedding)
    SELECT d.id, d.title, d.content, d.source_id,
           knowledge_text_field(d.metadata, 'app_under_test'),
           (SELECT l2_normalize(avg(v.embedding)) FROM siam_vectors v WHERE v.document_id = d.id)
    FROM jsonb_to_recordset(documents) AS d(id uuid, source_type text, source_id text,
        title text, content text, metadata jsonb)
    WHERE d.source_type = 'wiki'
    ON CONFLICT (id) DO UPDATE SET title = excluded.title,
        markdown_content = excluded.markdown_content, url = excluded.url,
        app_name = excluded.app_name, embedding = excluded.embedding, updated_at = now();

    SELECT jsonb_array_length(documents),
           (SELECT sum(jsonb_array_length(d -> 'chunks'))::integer
            FROM jsonb_array_elements(documents) d);
$$;

-- The embedder of the stored vectors: recorded on first use (when its dimension fits
-- the column), then returned with the column's dimension for the caller to compare.
-- Replaced in 004_read_only_open: the current text is functions/knowledge_check_embedder.sql.
CREATE FUNCTION knowledge_check_embedder(embedder_name text, embedder_dimension integer)
RETURNS TABLE (name text, dimension integer, column_dimension integer)
LANGUAGE sql AS $$
    INSERT INTO knowledge_store_meta (key, value)
    SELECT entry.key, entry.value
    FROM (VALUES ('embedder', embedder_name),
                 ('embedder_dimension', embedder_dimension::text)) AS entry (key, value)
    WHERE embedder_dimension = (
        SELECT a.atttypmod FROM pg_attribute a
        WHERE a.attrelid = 'siam_vectors'::regclass AND a.attname = 'embedding')
    ON CONFLICT (key) DO NOTHING;

    SELECT (SELECT m.value FROM knowledge_store_meta m WHERE m.key = 'embedder'),
           (SELECT m.value::integer FROM knowledge_store_meta m WHERE m.key = 'embedder_dimension'),
           (SELECT a.atttypmod FROM pg_attribute a
            WHERE a.attrelid = 'siam_vectors'::regclass AND a.attname = 'embedding');
$$;

-- The document a detail link names: by source id, document id or passage id.
CREATE OR REPLACE FUNCTION knowledge_find_document(find_source_type text, find_key text, find_collection text)
RETURNS SETOF knowledge_documents
LANGUAGE sql STABLE AS $$
    SELECT d.* FROM knowledge_documents d
    WHERE d.source_type = find_source_type AND d.collection = find_collection
      AND (d.source_id = find_key
           OR d.id = knowledge_try_uuid(find_key)
           OR d.id = (SELECT v.document_id FROM siam_vectors v
                      WHERE v.id = knowledge_try_uuid(find_key)))
    ORDER BY d.source_id = find_key DESC
    LIMIT 1
$$;

\ir functions/knowledge_collections.sql

\ir functions/knowledge_stats.sql

-- PostgREST serves new functions once it reloads its schema cache.
NOTIFY pgrst, 'reload schema';
