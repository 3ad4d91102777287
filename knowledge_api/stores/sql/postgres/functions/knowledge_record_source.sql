CREATE OR REPLACE FUNCTION knowledge_record_source(source_collection text, source_name text)
RETURNS TABLE (name text, last_run timestamptz)
LANGUAGE sql AS $$
    INSERT INTO knowledge_sources AS s (collection, name) VALUES (source_collection, source_name)
    ON CONFLICT (collection, name) DO UPDATE SET last_run = now()
    RETURNING s.name, s.last_run
$$;
