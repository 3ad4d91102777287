CREATE OR REPLACE FUNCTION knowledge_record_source(
    source_collection text, source_name text, source_root text DEFAULT '',
    source_connector text DEFAULT ''
)
RETURNS TABLE (name text, last_run timestamptz)
LANGUAGE sql AS $$
    INSERT INTO knowledge_sources AS s (collection, name, root, connector)
    VALUES (source_collection, source_name, source_root, source_connector)
    ON CONFLICT (collection, name) DO UPDATE SET last_run = now(),
        root = CASE excluded.root WHEN '' THEN s.root ELSE excluded.root END,
        connector = CASE excluded.connector WHEN '' THEN s.connector
            ELSE excluded.connector END
    RETURNING s.name, s.last_run
$$;
