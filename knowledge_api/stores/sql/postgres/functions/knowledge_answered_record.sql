CREATE OR REPLACE FUNCTION knowledge_answered_record(
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
