CREATE OR REPLACE FUNCTION knowledge_planned_rows(
    filter_source_types text[] DEFAULT NULL,
    filter_organization text DEFAULT NULL,
    filter_division text DEFAULT NULL,
    filter_app_under_test text DEFAULT NULL,
    filter_metadata jsonb DEFAULT '{}',
    filter_collection text DEFAULT 'default',
    filter_where jsonb DEFAULT NULL,
    filter_collections text[] DEFAULT NULL
) RETURNS double precision
LANGUAGE plpgsql VOLATILE  -- EXPLAIN runs only in a volatile function; it writes nothing
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    searched text[] := coalesce(filter_collections, ARRAY[filter_collection]);
    plan json;
BEGIN
    EXECUTE 'EXPLAIN (FORMAT JSON) SELECT 1 FROM siam_vectors v WHERE '
        || knowledge_passes_sql(filter_where) INTO plan
    USING searched, filter_source_types, filter_organization, filter_division,
          filter_app_under_test, filter_metadata;
    RETURN (plan -> 0 -> 'Plan' ->> 'Plan Rows')::double precision;
END
$$;
