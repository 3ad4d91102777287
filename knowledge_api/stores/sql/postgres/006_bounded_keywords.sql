-- Keyword search ranks a bounded set of passages. Ranking reads each matching row, so a
-- query with a very common word read tens of thousands of rows on a large table. Now
-- the candidates are the passages holding every query word, and those holding any of
-- them, each taken up to 2,000 from the full-text index; only they are ranked. Below
-- 2,000 matches (any small or medium collection) nothing changes.
-- Replaced in 013_filter_language: the current text is functions/search_siam_vectors_text.sql.
CREATE OR REPLACE FUNCTION search_siam_vectors_text(
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
LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    terms tsquery := knowledge_any_terms(query_text);
    every tsquery := plainto_tsquery('english', query_text);
BEGIN
    IF btrim(query_text) = '' THEN
        RETURN;
    END IF;
    IF numnode(terms) > 0 THEN
        RETURN QUERY
        SELECT m.* FROM (
            (
            SELECT v.id, v.document_id, v.content, v.source_type, v.source_id, v.metadata,
                   ts_rank(v.fts, terms)::double precision AS rank, v.organization,
                   v.division, v.app_under_test, v.title, v.section, v.chunk_index,
                   v.chunk_count
            FROM siam_vectors v
             WHERE v.fts @@ every
               AND v.collection = filter_collection
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
                   v.chunk_count
            FROM siam_vectors v
             WHERE v.fts @@ terms AND NOT v.fts @@ every
               AND v.collection = filter_collection
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

NOTIFY pgrst, 'reload schema';
