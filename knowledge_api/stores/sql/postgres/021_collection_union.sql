-- Several collections searched as one: the search, facet and planning functions take
-- the collections as an array (filter_collections; NULL: filter_collection alone), so
-- both candidate lists are cut to their best over the union inside one query, and the
-- search functions return each passage's collection. A new argument and a new RETURNS
-- TABLE need the functions dropped and created again; the earlier migrations gave them
-- no grants or comments to restore.
DROP FUNCTION IF EXISTS match_siam_vectors_gemini(vector, double precision, integer, text[],
    text, text, text, jsonb, text, integer, jsonb);
DROP FUNCTION IF EXISTS search_siam_vectors_text(text, integer, text[], text, text, text,
    jsonb, text, jsonb);
DROP FUNCTION IF EXISTS knowledge_planned_rows(text[], text, text, text, jsonb, text, jsonb);
DROP FUNCTION IF EXISTS knowledge_facets(text[], integer, text[], text, text, text, jsonb,
    text, jsonb);

-- The WHERE expression of the search functions' filter arguments: $1 is the array of
-- collections searched.
\ir functions/knowledge_passes_sql.sql
\ir functions/knowledge_planned_rows.sql
-- Replaced in 025_reader_scoped_reads: the current text is functions/match_siam_vectors_gemini.sql.
CREATE OR REPLACE FUNCTION match_siam_vectors_gemini(
    query_embedding vector,
    match_threshold double precision DEFAULT 0.2,
    match_count integer DEFAULT 5,
    filter_source_types text[] DEFAULT NULL,
    filter_organization text DEFAULT NULL,
    filter_division text DEFAULT NULL,
    filter_app_under_test text DEFAULT NULL,
    filter_metadata jsonb DEFAULT '{}',
    filter_collection text DEFAULT 'default',
    ef_search integer DEFAULT 100,
    filter_where jsonb DEFAULT NULL,
    filter_collections text[] DEFAULT NULL
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
    chunk_count integer,
    collection text,
    created_at timestamptz,
    updated_at timestamptz
)
LANGUAGE plpgsql STABLE
SET hnsw.ef_search = 100
SET hnsw.iterative_scan = strict_order
SET plan_cache_mode = force_custom_plan
AS $$
#variable_conflict use_column
DECLARE
    searched text[] := coalesce(filter_collections, ARRAY[filter_collection]);
    passes text := knowledge_passes_sql(filter_where);
BEGIN
    PERFORM set_config('hnsw.ef_search', ef_search::text, true);
    IF filter_where IS NULL AND filter_source_types IS NULL AND filter_organization IS NULL
       AND filter_division IS NULL AND filter_app_under_test IS NULL AND filter_metadata = '{}' THEN
        RETURN QUERY
        SELECT nearest.id, nearest.document_id, nearest.content, nearest.source_type,
               nearest.source_id, nearest.metadata, 1 - nearest.distance, nearest.organization,
               nearest.division, nearest.app_under_test, nearest.title, nearest.section,
               nearest.chunk_index, nearest.chunk_count, nearest.collection,
               (SELECT d.created_at FROM knowledge_documents d WHERE d.id = nearest.document_id),
               (SELECT d.updated_at FROM knowledge_documents d WHERE d.id = nearest.document_id)
        FROM (
            SELECT v.id, v.document_id, v.content, v.source_type, v.source_id, v.metadata,
                   v.embedding <=> query_embedding AS distance, v.organization, v.division,
                   v.app_under_test, v.title, v.section, v.chunk_index, v.chunk_count, v.collection
            FROM siam_vectors v
            WHERE v.collection = ANY (searched)
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
        RETURN;
    END IF;
    -- The passages a filter lets through, when the planner expects few, are measured
    -- exactly (OFFSET 0 keeps the HNSW index out of it): an HNSW scan walks the graph
    -- past about N/allowed passages for each one that passes (and may stop short), an
    -- exact one reads each allowed passage's vector once. The costs meet near
    -- allowed = sqrt(6 k N) (k results of N passages: 3,500 at 200,000 for 10).
    RETURN QUERY EXECUTE format($sql$
        SELECT nearest.id, nearest.document_id, nearest.content, nearest.source_type,
               nearest.source_id, nearest.metadata, 1 - nearest.distance, nearest.organization,
               nearest.division, nearest.app_under_test, nearest.title, nearest.section,
               nearest.chunk_index, nearest.chunk_count, nearest.collection,
               (SELECT d.created_at FROM knowledge_documents d WHERE d.id = nearest.document_id),
               (SELECT d.updated_at FROM knowledge_documents d WHERE d.id = nearest.document_id)
        FROM (
            SELECT v.id, v.document_id, v.content, v.source_type, v.source_id, v.metadata,
                   v.embedding <=> $7 AS distance, v.organization, v.division,
                   v.app_under_test, v.title, v.section, v.chunk_index, v.chunk_count, v.collection
            FROM siam_vectors v
            WHERE %s
            %s
        ) nearest
        WHERE 1 - nearest.distance > $9
        ORDER BY nearest.distance
        LIMIT $8$sql$, passes,
        CASE WHEN knowledge_planned_rows(filter_source_types, filter_organization,
                      filter_division, filter_app_under_test, filter_metadata,
                      filter_collection, filter_where, filter_collections)
                  <= sqrt(6.0 * match_count * greatest((SELECT c.reltuples FROM pg_class c
                                                        WHERE c.oid = 'siam_vectors'::regclass), 0))
             THEN 'OFFSET 0' ELSE 'ORDER BY v.embedding <=> $7 LIMIT $8' END)
    USING searched, filter_source_types, filter_organization, filter_division,
          filter_app_under_test, filter_metadata, query_embedding, match_count, match_threshold;
END
$$;

-- Replaced in 025_reader_scoped_reads: the current text is functions/search_siam_vectors_text.sql.
CREATE OR REPLACE FUNCTION search_siam_vectors_text(
    query_text text,
    match_count integer DEFAULT 5,
    filter_source_types text[] DEFAULT NULL,
    filter_organization text DEFAULT NULL,
    filter_division text DEFAULT NULL,
    filter_app_under_test text DEFAULT NULL,
    filter_metadata jsonb DEFAULT '{}',
    filter_collection text DEFAULT 'default',
    filter_where jsonb DEFAULT NULL,
    filter_collections text[] DEFAULT NULL
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
    chunk_count integer,
    collection text,
    created_at timestamptz,
    updated_at timestamptz
)
LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    searched text[] := coalesce(filter_collections, ARRAY[filter_collection]);
    terms tsquery := knowledge_any_terms(query_text);
    every tsquery := plainto_tsquery('english', query_text);
    condition text := CASE WHEN filter_where IS NULL THEN 'true'
                           ELSE knowledge_filter_sql(filter_where) END;
    passes text := format($sql$ v.collection = ANY ($1)
               AND ($2 IS NULL OR v.source_type = ANY ($2))
               AND ($3 IS NULL OR v.organization = $3)
               AND ($4 IS NULL OR v.division = $4)
               AND ($5 IS NULL OR v.app_under_test = $5)
               AND ($6 = '{}' OR v.metadata @> $6)
               AND (%s) $sql$, condition);
    columns text := 'v.id, v.document_id, v.content, v.source_type, v.source_id, v.metadata, '
        '%s, v.organization, v.division, v.app_under_test, v.title, v.section, '
        'v.chunk_index, v.chunk_count, v.collection';
BEGIN
    IF filter_where IS NULL THEN  -- the static queries of before
        IF btrim(query_text) = '' THEN
            RETURN;
        END IF;
        IF numnode(terms) > 0 THEN
            RETURN QUERY
            SELECT m.*,
                   (SELECT d.created_at FROM knowledge_documents d WHERE d.id = m.document_id),
                   (SELECT d.updated_at FROM knowledge_documents d WHERE d.id = m.document_id)
            FROM (
                (
                SELECT v.id, v.document_id, v.content, v.source_type, v.source_id, v.metadata,
                       ts_rank(v.fts, terms)::double precision AS rank, v.organization,
                       v.division, v.app_under_test, v.title, v.section, v.chunk_index,
                       v.chunk_count, v.collection
                FROM siam_vectors v
                 WHERE v.fts @@ every
                   AND v.collection = ANY (searched)
                   AND (filter_source_types IS NULL OR v.source_type = ANY (filter_source_types))
                   AND (filter_organization IS NULL OR v.organization = filter_organization)
                   AND (filter_division IS NULL OR v.division = filter_division)
                   AND (filter_app_under_test IS NULL OR v.app_under_test = filter_app_under_test)
                   AND (filter_metadata = '{}' OR v.metadata @> filter_metadata)
                 LIMIT 2000)
                UNION ALL
                (
                SELECT v.id, v.document_id, v.content, v.source_type, v.source_id, v.metadata,
                       ts_rank(v.fts, terms)::double precision AS rank, v.organization,
                       v.division, v.app_under_test, v.title, v.section, v.chunk_index,
                       v.chunk_count, v.collection
                FROM siam_vectors v
                 WHERE v.fts @@ terms AND NOT v.fts @@ every
                   AND v.collection = ANY (searched)
                   AND (filter_source_types IS NULL OR v.source_type = ANY (filter_source_types))
                   AND (filter_organization IS NULL OR v.organization = filter_organization)
                   AND (filter_division IS NULL OR v.division = filter_division)
                   AND (filter_app_under_test IS NULL OR v.app_under_test = filter_app_under_test)
                   AND (filter_metadata = '{}' OR v.metadata @> filter_metadata)
                 LIMIT 2000)
            ) m
            ORDER BY 7 DESC, 1
            LIMIT match_count;
            IF FOUND THEN
                RETURN;
            END IF;
        END IF;
        RETURN QUERY
        SELECT v.id, v.document_id, v.content, v.source_type, v.source_id, v.metadata,
               (CASE WHEN v.title ILIKE knowledge_like_pattern(query_text) THEN 0.002 ELSE 0.001 END)::double precision,
               v.organization, v.division, v.app_under_test, v.title, v.section, v.chunk_index,
               v.chunk_count, v.collection,
               (SELECT d.created_at FROM knowledge_documents d WHERE d.id = v.document_id),
               (SELECT d.updated_at FROM knowledge_documents d WHERE d.id = v.document_id)
        FROM siam_vectors v
        WHERE (v.content ILIKE knowledge_like_pattern(query_text)
               OR v.title ILIKE knowledge_like_pattern(query_text))
          AND v.collection = ANY (searched)
          AND (filter_source_types IS NULL OR v.source_type = ANY (filter_source_types))
          AND (filter_organization IS NULL OR v.organization = filter_organization)
          AND (filter_division IS NULL OR v.division = filter_division)
          AND (filter_app_under_test IS NULL OR v.app_under_test = filter_app_under_test)
          AND (filter_metadata = '{}' OR v.metadata @> filter_metadata)
        ORDER BY 7 DESC, v.id
        LIMIT match_count;
        RETURN;
    END IF;
    IF btrim(query_text) = '' THEN
        RETURN;
    END IF;
    IF numnode(terms) > 0 THEN
        RETURN QUERY EXECUTE format($sql$
        SELECT m.*,
               (SELECT d.created_at FROM knowledge_documents d WHERE d.id = m.document_id),
               (SELECT d.updated_at FROM knowledge_documents d WHERE d.id = m.document_id)
        FROM (
            (SELECT %1$s FROM siam_vectors v WHERE v.fts @@ $8 AND %2$s LIMIT 2000)
            UNION ALL
            (SELECT %1$s FROM siam_vectors v
             WHERE v.fts @@ $7 AND NOT v.fts @@ $8 AND %2$s LIMIT 2000)
        ) m
        ORDER BY 7 DESC, 1
        LIMIT $9$sql$, format(columns, 'ts_rank(v.fts, $7)::double precision'), passes)
        USING searched, filter_source_types, filter_organization, filter_division,
              filter_app_under_test, filter_metadata, terms, every, match_count;
        IF FOUND THEN
            RETURN;
        END IF;
    END IF;
    RETURN QUERY EXECUTE format($sql$
    SELECT %1$s,
           (SELECT d.created_at FROM knowledge_documents d WHERE d.id = v.document_id),
           (SELECT d.updated_at FROM knowledge_documents d WHERE d.id = v.document_id)
    FROM siam_vectors v
    WHERE (v.content ILIKE knowledge_like_pattern($7) OR v.title ILIKE knowledge_like_pattern($7))
      AND %2$s
    ORDER BY 7 DESC, v.id
    LIMIT $8$sql$,
        format(columns, '(CASE WHEN v.title ILIKE knowledge_like_pattern($7) '
            'THEN 0.002 ELSE 0.001 END)::double precision'), passes)
    USING searched, filter_source_types, filter_organization, filter_division,
          filter_app_under_test, filter_metadata, query_text, match_count;
END;
$$;
\ir functions/knowledge_facets.sql

NOTIFY pgrst, 'reload schema';
