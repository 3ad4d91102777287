CREATE OR REPLACE FUNCTION knowledge_ratings_page(page_size integer, before_id bigint, since text)
RETURNS TABLE (
    id bigint, at timestamptz, query_id uuid, rating text, key text, comment text,
    cited jsonb, expected_source text, request_id text
)
LANGUAGE sql STABLE AS $$
    SELECT r.id, r.at, r.query_id, r.rating, r.key, r.comment, r.cited, r.expected_source,
           r.request_id
    FROM knowledge_ratings r
    WHERE (before_id IS NULL OR r.id < before_id)
      AND (since IS NULL OR r.at >= since::timestamptz)
    ORDER BY r.id DESC
    LIMIT page_size
$$;
