CREATE OR REPLACE FUNCTION knowledge_facet_values(source_type text, source_id text, metadata jsonb)
RETURNS TABLE (field text, kind text, value text)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT 'source_type', 'string', source_type
    UNION ALL
    SELECT 'source_id', 'string', source_id
    UNION ALL
    SELECT e.key, jsonb_typeof(e.value), e.value #>> '{}'
    FROM jsonb_each(metadata) e
    WHERE jsonb_typeof(e.value) IN ('string', 'number', 'boolean')
      AND e.key NOT IN ('source_type', 'source_id')
$$;
