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
    filter_acl text[] DEFAULT NULL,
    filter_acl_rows double precision DEFAULT NULL
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
    allowed double precision;
    few boolean := false;
BEGIN
    PERFORM set_config('hnsw.ef_search', ef_search::text, true);
    -- Few passages let through are measured exactly (knowledge_exact_rows; OFFSET 0
    -- keeps the HNSW index out of it). How many the readers' principals alone allow
    -- is the caller's estimate (filter_acl_rows, from the statistics) when it gives one.
    IF filtered OR filter_acl IS NOT NULL THEN
        allowed := coalesce(CASE WHEN NOT filtered THEN filter_acl_rows END,
            knowledge_planned_rows(filter_source_types, filter_organization,
                filter_division, filter_app_under_test, filter_metadata, filter_collection,
                knowledge_with_acl(filter_where, filter_acl), filter_collections));
        few := allowed <= knowledge_exact_rows(match_count);
    END IF;
    -- No filter but the readers' principals, letting many through: the graph's own
    -- query, each passage met tested against them (IS TRUE: never a bitmap of the
    -- access list's index, which would list a good share of the table). The iterative
    -- scan goes on until match_count pass; in relaxed order, as the rows are sorted
    -- again below: at half the passages allowed, a strict one took 1.4 times the
    -- unfiltered query's time (it went on past the first ef_search candidates for
    -- nearly one query in two), a relaxed one as long as the unfiltered. The graph
    -- keeps a quarter more candidates than the allowed share needs on average (up to
    -- twice ef_search), so that nearly every query ends with its first ones: each
    -- further round walks the graph as far again (at half allowed, the vector query
    -- took 1.3 times the unfiltered one's time instead of 1.5).
    IF NOT filtered AND NOT few THEN
        IF filter_acl IS NOT NULL THEN
            PERFORM set_config('hnsw.iterative_scan', 'relaxed_order', true);
            PERFORM set_config('hnsw.ef_search', least(1000, 2 * ef_search, greatest(ef_search,
                ceil(1.25 * match_count * greatest((SELECT c.reltuples FROM pg_class c
                    WHERE c.oid = 'siam_vectors'::regclass), 1) / greatest(allowed, 1))))::text,
                true);
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
              AND (filter_acl IS NULL OR knowledge_acl_allows(v.acl, filter_acl) IS TRUE)
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
