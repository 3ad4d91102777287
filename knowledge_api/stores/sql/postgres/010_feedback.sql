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

\ir functions/knowledge_answered_record.sql

\ir functions/knowledge_answered_find.sql

-- Replaced in 018_one_rating_per_key: the current text is functions/knowledge_rating_add.sql.
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

\ir functions/knowledge_ratings_page.sql

NOTIFY pgrst, 'reload schema';
