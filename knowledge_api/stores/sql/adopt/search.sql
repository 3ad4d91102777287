-- The functions the service calls on an adopted database. They read the tables other
-- pipelines fill, as those pipelines shaped them (every column cast to what the service
-- reads, so a varchar or json column serves too), and never write. Keyword search uses
-- the expression indexes of the adoption, so the tables keep their columns.
-- knowledge_match_siam_vectors, knowledge_search_siam_vectors and
-- knowledge_search_wiki_documents are replaced in acl_search.sql (the step
-- knowledge_acl_functions), which keeps their text within a reader's principals.

-- The query's words as one-lexeme queries (stemmed, stop words dropped, each once).
CREATE FUNCTION knowledge_adopted_terms(query_text text) RETURNS TABLE (term tsquery)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT DISTINCT quote_literal(lexeme)::tsquery
    FROM unnest(tsvector_to_array(to_tsvector('english'::regconfig, query_text))) AS lexeme
$$;

CREATE FUNCTION knowledge_adopted_pattern(query_text text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT '%' || replace(replace(replace(btrim(query_text), '\', '\\'), '%', '\%'), '_', '\_') || '%'
$$;

-- Passages by cosine similarity, best first (the nearest match_count).
CREATE FUNCTION knowledge_match_siam_vectors(
    query_embedding vector,
    match_count integer DEFAULT 10,
    filter_source_types text[] DEFAULT NULL,
    filter_organization text DEFAULT NULL,
    filter_division text DEFAULT NULL,
    filter_app_under_test text DEFAULT NULL,
    filter_metadata jsonb DEFAULT '{}'
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
    ORDER BY v.embedding <=> query_embedding
    LIMIT match_count
$$;

-- Passages by keyword: the passages holding any query word, scored by the sum of the
-- inverse document frequencies of the words they hold, ln(1 + rows / rows with the
-- word). Everything comes from the expression index (one scan per word): no tsvector
-- is computed per matching row, which, without a stored tsvector column, would make a
-- common word cost a parse of every passage that holds it. A literal ILIKE match is the
-- last resort when no word is found. Plans are made for the actual arguments: a generic
-- plan cannot use the expression index for words it does not know.
CREATE FUNCTION knowledge_search_siam_vectors(
    query_text text,
    match_count integer DEFAULT 10,
    filter_source_types text[] DEFAULT NULL,
    filter_organization text DEFAULT NULL,
    filter_division text DEFAULT NULL,
    filter_app_under_test text DEFAULT NULL,
    filter_metadata jsonb DEFAULT '{}'
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
    ORDER BY 1
    LIMIT match_count;
END;
$$;

-- Wiki pages by keyword over title and markdown, scored like passages; ILIKE as the
-- last resort.
CREATE FUNCTION knowledge_search_wiki_documents(
    query_text text,
    match_count integer DEFAULT 10,
    filter_app_name text DEFAULT NULL
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
    ORDER BY 6 DESC, 1
    LIMIT match_count;
END;
$$;

-- A number that moves whenever either table is written, by anyone: cached answers follow
-- it. Backends report their writes to the statistics within about a second of commit.
-- (Two columns: a one-column set would come back over PostgREST as bare values.)
CREATE FUNCTION knowledge_adopted_generation() RETURNS TABLE (generation bigint, tables integer)
LANGUAGE sql STABLE AS $$
    SELECT coalesce(sum(s.n_tup_ins + s.n_tup_upd + s.n_tup_del), 0)::bigint, count(*)::integer
    FROM pg_stat_user_tables s
    WHERE s.relid IN ('siam_vectors'::regclass, 'wiki_documents'::regclass)
$$;

NOTIFY pgrst, 'reload schema';
