CREATE OR REPLACE FUNCTION knowledge_list_sources(source_collection text DEFAULT NULL)
RETURNS TABLE (
    collection text, name text, documents bigint, last_run timestamptz, root text,
    connector text
)
LANGUAGE sql STABLE AS $$
    SELECT s.collection, s.name,
           (SELECT count(*) FROM knowledge_documents d
            WHERE d.collection = s.collection AND d.source = s.name),
           s.last_run, s.root, s.connector
    FROM knowledge_sources s
    WHERE source_collection IS NULL OR s.collection = source_collection
    ORDER BY s.collection, s.name
$$;
