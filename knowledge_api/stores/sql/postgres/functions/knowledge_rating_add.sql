CREATE OR REPLACE FUNCTION knowledge_rating_add(
    rating_query_id text, rating_value text, rating_key text, rating_comment text,
    rating_cited jsonb, rating_expected_source text, rating_request_id text
)
RETURNS TABLE (id bigint)
LANGUAGE sql AS $$
    INSERT INTO knowledge_ratings (query_id, rating, key, comment, cited, expected_source,
                                   request_id)
    VALUES (rating_query_id::uuid, rating_value, rating_key, rating_comment, rating_cited,
            rating_expected_source, rating_request_id)
    RETURNING id
$$;
