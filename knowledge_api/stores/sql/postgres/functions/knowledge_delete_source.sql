CREATE OR REPLACE FUNCTION knowledge_delete_source(source_collection text, source_name text)
RETURNS TABLE (name text, deleted bigint)
LANGUAGE sql AS $$
    DELETE FROM knowledge_sources s WHERE s.collection = source_collection AND s.name = source_name;
    WITH gone AS (
        DELETE FROM knowledge_documents d
        WHERE d.collection = source_collection AND d.source = source_name RETURNING 1)
    SELECT source_name, count(*) FROM gone
$$;
