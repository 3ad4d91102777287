CREATE OR REPLACE FUNCTION knowledge_collection_stats()
RETURNS TABLE (name text, documents bigint, chunks bigint, sources bigint,
    updated_at timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT c.name,
           (SELECT count(*) FROM knowledge_documents d WHERE d.collection = c.name),
           (SELECT count(*) FROM siam_vectors v WHERE v.collection = c.name),
           (SELECT count(*) FROM knowledge_sources s WHERE s.collection = c.name),
           greatest((SELECT max(d.updated_at) FROM knowledge_documents d
                     WHERE d.collection = c.name),
                    (SELECT max(s.last_run) FROM knowledge_sources s WHERE s.collection = c.name))
    FROM (SELECT DISTINCT d.collection AS name FROM knowledge_documents d
          UNION SELECT s.collection FROM knowledge_sources s) c
    ORDER BY c.name
$$;
