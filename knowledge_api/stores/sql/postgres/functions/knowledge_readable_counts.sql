CREATE OR REPLACE FUNCTION knowledge_readable_counts(readers text[])
RETURNS TABLE (collection text, source text, documents bigint, chunks bigint)
LANGUAGE sql STABLE AS $$
    SELECT d.collection, d.source, count(*),
           coalesce(sum((SELECT count(*) FROM siam_vectors v WHERE v.document_id = d.id)), 0)
    FROM knowledge_documents d
    WHERE d.acl && readers
    GROUP BY d.collection, d.source
    ORDER BY d.collection, d.source
$$;
