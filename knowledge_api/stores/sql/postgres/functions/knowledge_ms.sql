CREATE OR REPLACE FUNCTION knowledge_ms(value timestamptz) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT round(extract(epoch FROM value) * 1000)::bigint
$$;
