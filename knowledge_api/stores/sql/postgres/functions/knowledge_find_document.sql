CREATE OR REPLACE FUNCTION knowledge_find_document(find_source_type text, find_key text, find_collection text)
RETURNS SETOF knowledge_documents
LANGUAGE sql STABLE AS $$
    -- every document whose source id `find_key` is (one per source), and the one whose
    -- id or passage's id it is; the caller prefers the first kind
    SELECT d.* FROM knowledge_documents d
    WHERE d.source_type = find_source_type AND d.collection = find_collection
      AND (d.source_id = find_key
           OR d.id = knowledge_try_uuid(find_key)
           OR d.id = (SELECT v.document_id FROM siam_vectors v
                      WHERE v.id = knowledge_try_uuid(find_key)))
    ORDER BY d.source_id = find_key DESC, d.source
$$;
