CREATE OR REPLACE FUNCTION knowledge_rating_add(
    rating_query_id text, rating_value text, rating_key text, rating_comment text,
    rating_cited jsonb, rating_expected_source text, rating_request_id text
)
RETURNS TABLE (id bigint)
LANGUAGE sql AS $$
    INSERT INTO knowledge_ratings AS r (query_id, rating, key, comment, cited,
                                        expected_source, request_id)
    VALUES (rating_query_id::uuid, rating_value, rating_key, rating_comment, rating_cited,
            rating_expected_source, rating_request_id)
    ON CONFLICT (query_id, key) DO UPDATE
        SET at = now(), rating = EXCLUDED.rating, comment = EXCLUDED.comment,
            cited = EXCLUDED.cited, expected_source = EXCLUDED.expected_source,
            request_id = EXCLUDED.request_id
    RETURNING r.id
$$;
