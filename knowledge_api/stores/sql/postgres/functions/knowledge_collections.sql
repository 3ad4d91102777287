CREATE OR REPLACE FUNCTION knowledge_collections()
RETURNS TABLE (collection text, documents bigint)
LANGUAGE sql STABLE AS $$
    SELECT d.collection, count(*) FROM knowledge_documents d GROUP BY 1 ORDER BY 1
$$;
