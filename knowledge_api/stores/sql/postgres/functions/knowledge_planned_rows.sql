CREATE OR REPLACE FUNCTION knowledge_planned_rows(
    passes text,
    filter_collection text,
    filter_source_types text[],
    filter_organization text,
    filter_division text,
    filter_app_under_test text,
    filter_metadata jsonb
) RETURNS double precision
LANGUAGE plpgsql VOLATILE  -- EXPLAIN runs only in a volatile function; it writes nothing
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    plan json;
BEGIN
    EXECUTE 'EXPLAIN (FORMAT JSON) SELECT 1 FROM siam_vectors v WHERE ' || passes INTO plan
    USING filter_collection, filter_source_types, filter_organization, filter_division,
          filter_app_under_test, filter_metadata;
    RETURN (plan -> 0 -> 'Plan' ->> 'Plan Rows')::double precision;
END
$$;
