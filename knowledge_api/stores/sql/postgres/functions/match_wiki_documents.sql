CREATE OR REPLACE FUNCTION match_wiki_documents(
    query_embedding vector,
    match_threshold double precision DEFAULT 0.2,
    match_count integer DEFAULT 10,
    filter_app_name text DEFAULT NULL
) RETURNS TABLE (
    id uuid,
    title text,
    url text,
    app_name text,
    markdown_content text,
    similarity double precision
)
LANGUAGE sql STABLE
SET hnsw.ef_search = 100
SET hnsw.iterative_scan = strict_order
SET plan_cache_mode = force_custom_plan
AS $$
    SELECT nearest.id, nearest.title, nearest.url, nearest.app_name,
           nearest.markdown_content, 1 - nearest.distance
    FROM (
        SELECT w.id, w.title, w.url, w.app_name, w.markdown_content,
               w.embedding <=> query_embedding AS distance
        FROM wiki_documents w
        WHERE filter_app_name IS NULL OR w.app_name = filter_app_name
        ORDER BY w.embedding <=> query_embedding
        LIMIT match_count
    ) nearest
    WHERE 1 - nearest.distance > match_threshold
    ORDER BY nearest.distance
$$;
