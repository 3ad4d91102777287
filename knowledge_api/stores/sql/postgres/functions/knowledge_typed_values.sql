CREATE OR REPLACE FUNCTION knowledge_typed_values(metadata jsonb)
RETURNS TABLE (key text, number numeric, ms bigint)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT t.key, t.number, t.ms
    FROM (
        SELECT e.key,
               CASE WHEN jsonb_typeof(e.value) = 'number'
                    THEN (e.value #>> '{}')::numeric END AS number,
               CASE WHEN jsonb_typeof(e.value) = 'string'
                    THEN knowledge_instant_ms(e.value #>> '{}') END AS ms
        FROM jsonb_each(metadata) e
    ) t
    WHERE t.number IS NOT NULL OR t.ms IS NOT NULL
$$;
