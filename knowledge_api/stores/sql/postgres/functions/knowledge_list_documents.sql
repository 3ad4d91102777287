CREATE OR REPLACE FUNCTION knowledge_list_documents(
    list_collection text,
    after_id uuid DEFAULT NULL,
    list_source_type text DEFAULT NULL,
    list_source text DEFAULT NULL,
    list_limit integer DEFAULT 100,
    list_readers text[] DEFAULT NULL
) RETURNS TABLE (id uuid, collection text, source_type text, source_id text, source text,
    title text, metadata jsonb, updated_at timestamptz, chunks bigint, created_at timestamptz,
    acl text[])
LANGUAGE sql STABLE AS $$
    SELECT d.id, d.collection, d.source_type, d.source_id, d.source, d.title, d.metadata,
           d.updated_at,
           (SELECT count(*) FROM siam_vectors v WHERE v.document_id = d.id), d.created_at,
           d.acl
    FROM knowledge_documents d
    WHERE d.collection = list_collection
      -- a range of the listing index whatever the plan: an `IS NULL OR` here would make
      -- a generic plan scan the collection from its first id for every page
      AND d.id > coalesce(after_id, '00000000-0000-0000-0000-000000000000')
      AND (list_source_type IS NULL OR d.source_type = list_source_type)
      AND (list_source IS NULL OR d.source = list_source)
      -- only what these principals may read (NULL: every document)
      AND (list_readers IS NULL OR d.acl && list_readers)
    ORDER BY d.id
    LIMIT list_limit
$$;
