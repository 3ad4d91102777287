CREATE OR REPLACE FUNCTION knowledge_instant_ms(value text) RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN NOT knowledge_is_instant(value) THEN NULL
        WHEN value ~ '(Z|[+-]\d{2}:\d{2})$' AND length(value) > 10
            THEN round(extract(epoch FROM value::timestamptz) * 1000)::bigint
        ELSE round(extract(epoch FROM value::timestamp AT TIME ZONE 'UTC') * 1000)::bigint
    END
$$;
