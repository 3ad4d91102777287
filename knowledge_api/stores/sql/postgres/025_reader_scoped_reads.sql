-- What a reader who may read part of the documents asks, answered about as cheaply as
-- what anyone asks.
--
-- The search functions take the reader's principals apart from the filter tree
-- (`filter_acl`). With no other filter, principals that let many passages through are
-- tested on each row a search meets, never through the access list's GIN index (whose
-- bitmap for half of 200,000 passages took over 100 ms to build, beside a keyword
-- search of 15), and the keyword search ranks as many of the reader's passages as a
-- search for everyone holds rather than 2,000 of them (which read twice the rows for a
-- reader of half); few are found through the index, and searched exactly by vector, as
-- before. With other filters they join the tree (knowledge_with_acl) and are planned
-- with them, as before.
DROP FUNCTION IF EXISTS match_siam_vectors_gemini(vector, double precision, integer, text[],
    text, text, text, jsonb, text, integer, jsonb, text[]);
DROP FUNCTION IF EXISTS search_siam_vectors_text(text, integer, text[], text, text, text,
    jsonb, text, jsonb, text[]);
-- A search's filter tree with the test of its readers' principals in it: the form the
-- filtered paths compile.
\ir functions/knowledge_with_acl.sql
-- The most passages a filter may let through for a search of `wanted` results to read
-- them all rather than an index of the whole table. The vector search measures them
-- exactly: an HNSW scan walks the graph past about N/allowed passages for each one that
-- passes (and may stop short), an exact one reads each allowed passage's vector once;
-- the costs meet near allowed = sqrt(6 k N) (k results of N passages: 3,500 at 200,000
-- for 10). The keyword search finds a reader's few passages through the access list's
-- index, and tests more on each row it meets.
\ir functions/knowledge_exact_rows.sql
-- Replaced in 026_readers_estimated: the current text is functions/match_siam_vectors_gemini.sql.
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
    filter_collections text[] DEFAULT NULL,
    filter_acl text[] DEFAULT NULL
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
    filtered boolean := filter_where IS NOT NULL OR filter_source_types IS NOT NULL
        OR filter_organization IS NOT NULL OR filter_division IS NOT NULL
        OR filter_app_under_test IS NOT NULL OR filter_metadata <> '{}';
    few boolean := false;
BEGIN
    PERFORM set_config('hnsw.ef_search', ef_search::text, true);
    -- Few passages let through are measured exactly (knowledge_exact_rows; OFFSET 0
    -- keeps the HNSW index out of it).
    IF filtered OR filter_acl IS NOT NULL THEN
        few := knowledge_planned_rows(filter_source_types, filter_organization,
                   filter_division, filter_app_under_test, filter_metadata, filter_collection,
                   knowledge_with_acl(filter_where, filter_acl), filter_collections)
               <= knowledge_exact_rows(match_count);
    END IF;
    -- No filter but the readers' principals, letting many through: the graph's own
    -- query, each passage met tested against them (IS TRUE: never a bitmap of the
    -- access list's index, which would list a good share of the table). The iterative
    -- scan goes on until match_count pass; in relaxed order, as the rows are sorted
    -- again below: at half the passages allowed, a strict one took 1.4 times the
    -- unfiltered query's time (it went on past the first ef_search candidates for
    -- nearly one query in two), a relaxed one as long as the unfiltered.
    IF NOT filtered AND NOT few THEN
        IF filter_acl IS NOT NULL THEN
            PERFORM set_config('hnsw.iterative_scan', 'relaxed_order', true);
        END IF;
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
              AND (filter_acl IS NULL OR (v.acl && filter_acl) IS TRUE)
            ORDER BY v.embedding <=> query_embedding
            LIMIT match_count
        ) nearest
        WHERE 1 - nearest.distance > match_threshold
        ORDER BY nearest.distance;
        RETURN;
    END IF;
    -- with other filters, the readers' principals are one more test of the tree
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
        LIMIT $8$sql$, knowledge_passes_sql(knowledge_with_acl(filter_where, filter_acl)),
        CASE WHEN few THEN 'OFFSET 0' ELSE 'ORDER BY v.embedding <=> $7 LIMIT $8' END)
    USING searched, filter_source_types, filter_organization, filter_division,
          filter_app_under_test, filter_metadata, query_embedding, match_count, match_threshold;
END
$$;
-- Replaced in 026_readers_estimated: the current text is functions/search_siam_vectors_text.sql.
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
    filter_collections text[] DEFAULT NULL,
    filter_acl text[] DEFAULT NULL
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
    bound integer := 2000;
    allowed double precision;
    wide boolean := false;
    passes text;
    columns text := 'v.id, v.document_id, v.content, v.source_type, v.source_id, v.metadata, '
        '%s, v.organization, v.division, v.app_under_test, v.title, v.section, '
        'v.chunk_index, v.chunk_count, v.collection';
BEGIN
    IF filter_where IS NOT NULL THEN  -- the readers' principals join the rest of the tree
        filter_where := knowledge_with_acl(filter_where, filter_acl);
        passes := knowledge_passes_sql(filter_where);
    ELSIF filter_acl IS NOT NULL AND btrim(query_text) <> '' THEN
        -- Principals that let many passages through are tested on each row met (IS
        -- TRUE: a bitmap of the access list's index would list a good share of the
        -- table), and the search ranks as many of theirs as a search for everyone holds:
        -- 2,000 times the share they may read, so it reads about as many rows whatever
        -- the share (and finds them however they lie); never fewer than ten times the
        -- results asked. Few are found through the index, and 2,000 of them ranked.
        allowed := knowledge_planned_rows(filter_collection => filter_collection,
            filter_where => knowledge_with_acl(NULL, filter_acl),
            filter_collections => filter_collections);
        wide := allowed > knowledge_exact_rows(match_count);
        IF wide THEN
            bound := least(2000, greatest(10 * match_count, ceil(2000 * allowed
                / greatest((SELECT c.reltuples FROM pg_class c
                            WHERE c.oid = 'siam_vectors'::regclass), 1))));
        END IF;
    END IF;
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
                   AND (filter_acl IS NULL OR CASE WHEN wide THEN (v.acl && filter_acl) IS TRUE
                                             ELSE v.acl && filter_acl END)
                 LIMIT bound)
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
                   AND (filter_acl IS NULL OR CASE WHEN wide THEN (v.acl && filter_acl) IS TRUE
                                             ELSE v.acl && filter_acl END)
                 LIMIT bound)
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
          AND (filter_acl IS NULL OR CASE WHEN wide THEN (v.acl && filter_acl) IS TRUE
                                     ELSE v.acl && filter_acl END)
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

-- Counting the documents a reader may read, and listing a page of them, in one query
-- each (the listing and the counts of collections and sources used to page through
-- every document): the documents' access lists under a GIN index too.
CREATE INDEX IF NOT EXISTS knowledge_documents_acl ON knowledge_documents USING gin (acl);
DROP FUNCTION IF EXISTS knowledge_list_documents(text, uuid, text, text, integer);
\ir functions/knowledge_list_documents.sql
-- By collection and source, the documents some principals may read and their passages.
-- Replaced in 026_readers_estimated: the current text is functions/knowledge_readable_counts.sql.
CREATE OR REPLACE FUNCTION knowledge_readable_counts(readers text[])
RETURNS TABLE (collection text, source text, documents bigint, chunks bigint)
LANGUAGE sql STABLE AS $$
    SELECT d.collection, d.source, count(*),
           coalesce(sum((SELECT count(*) FROM siam_vectors v WHERE v.document_id = d.id)), 0)
    FROM knowledge_documents d
    WHERE d.acl && readers
    GROUP BY d.collection, d.source
    ORDER BY d.collection, d.source
$$;

NOTIFY pgrst, 'reload schema';
