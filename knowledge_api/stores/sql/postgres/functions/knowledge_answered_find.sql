CREATE OR REPLACE FUNCTION knowledge_answered_find(answer_query_id text)
RETURNS TABLE (
    query_id uuid, at timestamptz, kind text, collection text, query text, ranking jsonb,
    results jsonb, cited jsonb
)
LANGUAGE sql STABLE AS $$
    SELECT a.query_id, a.at, a.kind, a.collection, a.query, a.ranking, a.results, a.cited
    FROM knowledge_answered a WHERE a.query_id = answer_query_id::uuid
$$;
