-- Wiki pages by meaning, once `knowledge-api migrate --wiki-vectors` gave them vectors
-- (knowledge_embedding; the TEXT column `embedding` stays for its other readers).
-- Replaced in wiki_acl_search.sql (the step knowledge_wiki_acl_vector_function).
CREATE FUNCTION knowledge_match_wiki_documents(
    query_embedding vector,
    match_count integer DEFAULT 10,
    filter_app_name text DEFAULT NULL
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
    ORDER BY w.knowledge_embedding <=> query_embedding
    LIMIT match_count
$$;

NOTIFY pgrst, 'reload schema';
