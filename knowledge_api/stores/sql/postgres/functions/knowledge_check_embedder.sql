CREATE OR REPLACE FUNCTION knowledge_check_embedder(embedder_name text, embedder_dimension integer)
RETURNS TABLE (name text, dimension integer, column_dimension integer)
LANGUAGE plpgsql AS $$
DECLARE
    columns integer := (SELECT a.atttypmod FROM pg_attribute a
                        WHERE a.attrelid = 'siam_vectors'::regclass AND a.attname = 'embedding');
BEGIN
    IF embedder_dimension = columns
       AND NOT EXISTS (SELECT 1 FROM knowledge_store_meta m WHERE m.key = 'embedder') THEN
        INSERT INTO knowledge_store_meta (key, value)
        VALUES ('embedder', embedder_name), ('embedder_dimension', embedder_dimension::text)
        ON CONFLICT (key) DO NOTHING;
    END IF;
    RETURN QUERY
    SELECT (SELECT m.value FROM knowledge_store_meta m WHERE m.key = 'embedder'),
           (SELECT m.value::integer FROM knowledge_store_meta m WHERE m.key = 'embedder_dimension'),
           columns;
END
$$;
