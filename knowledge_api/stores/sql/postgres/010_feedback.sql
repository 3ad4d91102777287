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

\ir functions/knowledge_rating_add.sql

\ir functions/knowledge_ratings_page.sql

NOTIFY pgrst, 'reload schema';
