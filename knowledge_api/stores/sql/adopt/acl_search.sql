-- Who may read each row of an adopted database: the searches of search.sql, replaced by
-- the same searches within a reader's principals, and the two writes of an access list.
-- A row passes when its knowledge_acl holds one of `filter_acl` (the reader's
-- principals, under the GIN index; NULL: any row) and one of each list of
-- `filter_acl_also` (a filter's own tests of `acl`). The service writes nothing else of
-- the tables other pipelines fill.

DROP FUNCTION knowledge_match_siam_vectors(vector, integer, text[], text, text, text, jsonb);
DROP FUNCTION knowledge_search_siam_vectors(text, integer, text[], text, text, text, jsonb);
DROP FUNCTION knowledge_search_wiki_documents(text, integer, text);

CREATE FUNCTION knowledge_acl_passes(acl text[], filter_acl text[], filter_acl_also jsonb)
RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT (filter_acl IS NULL OR acl && filter_acl)
       AND NOT EXISTS (
           SELECT 1 FROM jsonb_array_elements(coalesce(filter_acl_also, '[]')) t
           WHERE NOT acl && ARRAY(SELECT jsonb_array_elements_text(t.value)))
$$;

-- Passages by cosine similarity within the principals, best first.
CREATE FUNCTION knowledge_match_siam_vectors(
    query_embedding vector,
    match_count integer DEFAULT 10,
    filter_source_types text[] DEFAULT NULL,
    filter_organization text DEFAULT NULL,
    filter_division text DEFAULT NULL,
    filter_app_under_test text DEFAULT NULL,
    filter_metadata jsonb DEFAULT '{}',
    filter_acl text[] DEFAULT NULL,
    filter_acl_also jsonb DEFAULT '[]'
) RETURNS TABLE (
    id text, content text, source_type text, source_id text, metadata jsonb,
    organization text, division text, app_under_test text, similarity double precision
)
LANGUAGE sql STABLE
SET hnsw.ef_search = 100
SET hnsw.iterative_scan = strict_order
SET plan_cache_mode = force_custom_plan
AS $$
    SELECT v.id::text, v.content::text, v.source_type::text, v.source_id::text,
           coalesce(v.metadata::jsonb, '{}'), v.organization::text, v.division::text,
           v.app_under_test::text, 1 - (v.embedding <=> query_embedding)
    FROM siam_vectors v
    WHERE v.embedding IS NOT NULL
      AND (filter_source_types IS NULL OR v.source_type = ANY (filter_source_types))
      AND (filter_organization IS NULL OR v.organization = filter_organization)
      AND (filter_division IS NULL OR v.division = filter_division)
      AND (filter_app_under_test IS NULL OR v.app_under_test = filter_app_under_test)
      AND (filter_metadata = '{}' OR v.metadata::jsonb @> filter_metadata)
      AND (filter_acl IS NULL OR v.knowledge_acl && filter_acl)
      AND (filter_acl_also = '[]' OR knowledge_acl_passes(v.knowledge_acl, NULL, filter_acl_also))
    ORDER BY v.embedding <=> query_embedding
    LIMIT match_count
$$;

-- Passages by keyword within the principals, scored as search.sql scored them.
CREATE FUNCTION knowledge_search_siam_vectors(
    query_text text,
    match_count integer DEFAULT 10,
    filter_source_types text[] DEFAULT NULL,
    filter_organization text DEFAULT NULL,
    filter_division text DEFAULT NULL,
    filter_app_under_test text DEFAULT NULL,
    filter_metadata jsonb DEFAULT '{}',
    filter_acl text[] DEFAULT NULL,
    filter_acl_also jsonb DEFAULT '[]'
) RETURNS TABLE (
    id text, content text, source_type text, source_id text, metadata jsonb,
    organization text, division text, app_under_test text, rank double precision
)
LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_custom_plan
AS $$
BEGIN
    IF btrim(query_text) = '' THEN
        RETURN;
    END IF;
    RETURN QUERY
    WITH hits AS (
        SELECT t.term, m.id
        FROM knowledge_adopted_terms(query_text) t
        CROSS JOIN LATERAL (
            SELECT v.id FROM siam_vectors v
            WHERE to_tsvector('english'::regconfig, coalesce(v.content, '')) @@ t.term
              AND (filter_source_types IS NULL OR v.source_type = ANY (filter_source_types))
              AND (filter_organization IS NULL OR v.organization = filter_organization)
              AND (filter_division IS NULL OR v.division = filter_division)
              AND (filter_app_under_test IS NULL OR v.app_under_test = filter_app_under_test)
              AND (filter_metadata = '{}' OR v.metadata::jsonb @> filter_metadata)
              AND (filter_acl IS NULL OR v.knowledge_acl && filter_acl)
              AND (filter_acl_also = '[]'
                   OR knowledge_acl_passes(v.knowledge_acl, NULL, filter_acl_also))
        ) m
    ), best AS (
        SELECT s.id, sum(ln(1 + greatest(c.reltuples, s.docs) / s.docs)) AS score
        FROM (SELECT h.id, count(*) OVER (PARTITION BY h.term::text) AS docs FROM hits h) s
        CROSS JOIN (SELECT p.reltuples FROM pg_class p
                    WHERE p.oid = 'siam_vectors'::regclass) c
        GROUP BY s.id
        ORDER BY 2 DESC, 1
        LIMIT match_count
    )
    SELECT v.id::text, v.content::text, v.source_type::text, v.source_id::text,
           coalesce(v.metadata::jsonb, '{}'), v.organization::text, v.division::text,
           v.app_under_test::text, b.score::double precision
    FROM best b JOIN siam_vectors v ON v.id = b.id
    ORDER BY b.score DESC, b.id;
    IF FOUND THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT v.id::text, v.content::text, v.source_type::text, v.source_id::text,
           coalesce(v.metadata::jsonb, '{}'), v.organization::text, v.division::text,
           v.app_under_test::text, 0.001::double precision
    FROM siam_vectors v
    WHERE v.content ILIKE knowledge_adopted_pattern(query_text)
      AND (filter_source_types IS NULL OR v.source_type = ANY (filter_source_types))
      AND (filter_organization IS NULL OR v.organization = filter_organization)
      AND (filter_division IS NULL OR v.division = filter_division)
      AND (filter_app_under_test IS NULL OR v.app_under_test = filter_app_under_test)
      AND (filter_metadata = '{}' OR v.metadata::jsonb @> filter_metadata)
      AND knowledge_acl_passes(v.knowledge_acl, filter_acl, filter_acl_also)
    ORDER BY 1
    LIMIT match_count;
END;
$$;

-- Wiki pages by keyword within the principals, scored as search.sql scored them.
CREATE FUNCTION knowledge_search_wiki_documents(
    query_text text,
    match_count integer DEFAULT 10,
    filter_app_name text DEFAULT NULL,
    filter_acl text[] DEFAULT NULL,
    filter_acl_also jsonb DEFAULT '[]'
) RETURNS TABLE (
    id text, title text, url text, app_name text, markdown_content text, rank double precision
)
LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_custom_plan
AS $$
BEGIN
    IF btrim(query_text) = '' THEN
        RETURN;
    END IF;
    RETURN QUERY
    WITH hits AS (
        SELECT t.term, m.id
        FROM knowledge_adopted_terms(query_text) t
        CROSS JOIN LATERAL (
            SELECT w.id FROM wiki_documents w
            WHERE to_tsvector('english'::regconfig,
                              coalesce(w.title, '') || ' ' || coalesce(w.markdown_content, ''))
                  @@ t.term
              AND (filter_app_name IS NULL OR lower(w.app_name) = lower(filter_app_name))
              AND (filter_acl IS NULL OR w.knowledge_acl && filter_acl)
              AND (filter_acl_also = '[]'
                   OR knowledge_acl_passes(w.knowledge_acl, NULL, filter_acl_also))
        ) m
    ), best AS (
        SELECT s.id, sum(ln(1 + greatest(c.reltuples, s.docs) / s.docs)) AS score
        FROM (SELECT h.id, count(*) OVER (PARTITION BY h.term::text) AS docs FROM hits h) s
        CROSS JOIN (SELECT p.reltuples FROM pg_class p
                    WHERE p.oid = 'wiki_documents'::regclass) c
        GROUP BY s.id
        ORDER BY 2 DESC, 1
        LIMIT match_count
    )
    SELECT w.id::text, w.title::text, w.url::text, w.app_name::text, w.markdown_content::text,
           b.score::double precision
    FROM best b JOIN wiki_documents w ON w.id = b.id
    ORDER BY b.score DESC, b.id;
    IF FOUND THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT w.id::text, w.title::text, w.url::text, w.app_name::text, w.markdown_content::text,
           (CASE WHEN w.title ILIKE knowledge_adopted_pattern(query_text) THEN 0.002 ELSE 0.001 END)::double precision
    FROM wiki_documents w
    WHERE (w.title ILIKE knowledge_adopted_pattern(query_text)
           OR w.markdown_content ILIKE knowledge_adopted_pattern(query_text))
      AND (filter_app_name IS NULL OR lower(w.app_name) = lower(filter_app_name))
      AND knowledge_acl_passes(w.knowledge_acl, filter_acl, filter_acl_also)
    ORDER BY 6 DESC, 1
    LIMIT match_count;
END;
$$;

-- The access list of every passage of a source (a document is its passages); how many.
-- (Two columns: a one-column set would come back over PostgREST as bare values.)
CREATE FUNCTION knowledge_set_siam_acl(acl_source_type text, acl_source_id text, new_acl text[])
RETURNS TABLE (changed integer, done boolean) LANGUAGE sql VOLATILE AS $$
    WITH c AS (
        UPDATE siam_vectors v SET knowledge_acl = new_acl
        WHERE v.source_type = acl_source_type AND v.source_id = acl_source_id
        RETURNING 1)
    SELECT count(*)::integer, true FROM c
$$;

-- The access list of one wiki page; how many (0 or 1).
CREATE FUNCTION knowledge_set_wiki_acl(page_id text, new_acl text[])
RETURNS TABLE (changed integer, done boolean) LANGUAGE sql VOLATILE AS $$
    WITH c AS (
        UPDATE wiki_documents w SET knowledge_acl = new_acl
        WHERE w.id::text = page_id
        RETURNING 1)
    SELECT count(*)::integer, true FROM c
$$;

NOTIFY pgrst, 'reload schema';
