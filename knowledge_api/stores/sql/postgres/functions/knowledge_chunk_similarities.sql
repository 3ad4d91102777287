CREATE OR REPLACE FUNCTION knowledge_chunk_similarities(query_embedding vector, chunk_ids uuid[])
RETURNS TABLE (id uuid, similarity double precision)
LANGUAGE sql STABLE AS $$
    SELECT v.id, 1 - (v.embedding <=> query_embedding)
    FROM siam_vectors v
    WHERE v.id = ANY (chunk_ids)
$$;
