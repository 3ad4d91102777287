CREATE OR REPLACE FUNCTION knowledge_stats()
RETURNS TABLE (documents bigint, chunks bigint, generation bigint)
LANGUAGE sql STABLE AS $$
    SELECT (SELECT count(*) FROM knowledge_documents), (SELECT count(*) FROM siam_vectors),
           (SELECT s.generation FROM knowledge_store_state s)
$$;
