-- Answers as their readers rated them: each computed query or answer (its id, the query,
-- the ranking that ran, its results in order, its citations), and the ratings that
-- refer to it. Any replica resolves a query_id here.
CREATE TABLE knowledge_answered (
    query_id uuid PRIMARY KEY,
    at timestamptz NOT NULL DEFAULT now(),
    kind text NOT NULL,
    collection text NOT NULL,
    query text NOT NULL,
    ranking jsonb NOT NULL,
    results jsonb NOT NULL,
    cited jsonb NOT NULL
);

CREATE TABLE knowledge_ratings (
    id bigserial PRIMARY KEY,
    at timestamptz NOT NULL DEFAULT now(),
    query_id uuid NOT NULL REFERENCES knowledge_answered (query_id) ON DELETE CASCADE,
    rating text NOT NULL CHECK (rating IN ('up', 'down')),
    key text NOT NULL,
    comment text,
    cited jsonb,
    expected_source text,
    request_id text
);

CREATE FUNCTION knowledge_answered_record(
    answer_query_id text, answer_kind text, answer_collection text, answer_query text,
    answer_ranking jsonb, answer_results jsonb, answer_cited jsonb
)
RETURNS TABLE (recorded boolean)
LANGUAGE sql AS $$
    INSERT INTO knowledge_answered (query_id, kind, collection, query, ranking, results, cited)
    VALUES (answer_query_id::uuid, answer_kind, answer_collection, answer_query,
            answer_ranking, answer_results, answer_cited)
    ON CONFLICT (query_id) DO NOTHING
    RETURNING true
$$;

CREATE FUNCTION knowledge_answered_find(answer_query_id text)
RETURNS TABLE (
    query_id uuid, at timestamptz, kind text, collection text, query text, ranking jsonb,
    results jsonb, cited jsonb
)
LANGUAGE sql STABLE AS $$
    SELECT a.query_id, a.at, a.kind, a.collection, a.query, a.ranking, a.results, a.cited
    FROM knowledge_answered a WHERE a.query_id = answer_query_id::uuid
$$;

CREATE FUNCTION knowledge_rating_add(
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

CREATE FUNCTION knowledge_ratings_page(page_size integer, before_id bigint, since text)
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

NOTIFY pgrst, 'reload schema';
