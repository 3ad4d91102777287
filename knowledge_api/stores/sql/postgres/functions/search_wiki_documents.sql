CREATE OR REPLACE FUNCTION search_wiki_documents(
    query_text text,
    match_count integer DEFAULT 10,
    filter_app_name text DEFAULT NULL
) RETURNS TABLE (
    id uuid,
    title text,
    url text,
    app_name text,
    markdown_content text,
    rank double precision
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
        SELECT w.id, w.title, w.url, w.app_name, w.markdown_content,
               ts_rank(w.fts, terms)::double precision
        FROM wiki_documents w
        WHERE w.fts @@ terms AND (filter_app_name IS NULL OR w.app_name = filter_app_name)
        ORDER BY 6 DESC, w.id
        LIMIT match_count;
        IF FOUND THEN
            RETURN;
        END IF;
    END IF;
    RETURN QUERY
    SELECT w.id, w.title, w.url, w.app_name, w.markdown_content,
           (CASE WHEN w.title ILIKE knowledge_like_pattern(query_text) THEN 0.002 ELSE 0.001 END)::double precision
    FROM wiki_documents w
    WHERE (w.title ILIKE knowledge_like_pattern(query_text)
           OR w.markdown_content ILIKE knowledge_like_pattern(query_text))
      AND (filter_app_name IS NULL OR w.app_name = filter_app_name)
    ORDER BY 6 DESC, w.id
    LIMIT match_count;
END;
$$;
