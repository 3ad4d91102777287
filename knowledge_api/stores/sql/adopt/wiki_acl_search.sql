-- Wiki pages by meaning within a reader's principals (acl_search.sql), once both the
-- wiki vectors and the access lists are there: replaces wiki_search.sql's.
DROP FUNCTION knowledge_match_wiki_documents(vector, integer, text);

CREATE FUNCTION knowledge_match_wiki_documents(
    query_embedding vector,
    match_count integer DEFAULT 10,
    filter_app_name text DEFAULT NULL,
    filter_acl text[] DEFAULT NULL,
    filter_acl_also jsonb DEFAULT '[]'
) RETURNS TABLE (
    id text, title text, url text, app_name text, markdown_content text,
    similarity double precision
)
LANGUAGE sql STABLE
SET hnsw.ef_search = 100
SET hnsw.iterative_scan = strict_order
SET plan_cache_mode = force_custom_plan
AS $$
    SELECT w.id::text, w.title::text, w.url::text, w.app_name::text, w.markdown_content::text,
           1 - (w.knowledge_embedding <=> query_embedding)
    FROM wiki_documents w
    WHERE w.knowledge_embedding IS NOT NULL
      AND (filter_app_name IS NULL OR lower(w.app_name) = lower(filter_app_name))
      AND (filter_acl IS NULL OR w.knowledge_acl && filter_acl)
      AND (filter_acl_also = '[]' OR knowledge_acl_passes(w.knowledge_acl, NULL, filter_acl_also))
    ORDER BY w.knowledge_embedding <=> query_embedding
    LIMIT match_count
$$;

NOTIFY pgrst, 'reload schema';
