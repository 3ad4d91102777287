CREATE OR REPLACE FUNCTION knowledge_lease_source(
    source_collection text, source_name text, claim_holder text, claim_seconds double precision
)
RETURNS TABLE (held boolean, holder text)
LANGUAGE sql AS $$
    WITH taken AS (
        UPDATE knowledge_sources s
        SET lease_holder = CASE WHEN claim_seconds > 0 THEN claim_holder ELSE '' END,
            lease_until = clock_timestamp() + make_interval(secs => claim_seconds)
        WHERE s.collection = source_collection AND s.name = source_name
            AND (s.lease_holder IN ('', claim_holder) OR s.lease_until < clock_timestamp())
        RETURNING s.lease_holder
    )
    SELECT count(*) = 1, coalesce(max(lease_holder), '') FROM taken
$$;
