CREATE OR REPLACE FUNCTION knowledge_facets(
    facet_fields text[],
    facet_limit integer DEFAULT 100,
    filter_source_types text[] DEFAULT NULL,
    filter_organization text DEFAULT NULL,
    filter_division text DEFAULT NULL,
    filter_app_under_test text DEFAULT NULL,
    filter_metadata jsonb DEFAULT '{}',
    filter_collection text DEFAULT 'default',
    filter_where jsonb DEFAULT NULL,
    filter_collections text[] DEFAULT NULL
) RETURNS TABLE (field text, kind text, value text, passages bigint, distinct_values bigint)
LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    searched text[] := coalesce(filter_collections, ARRAY[filter_collection]);
    unfiltered boolean := filter_where IS NULL AND filter_source_types IS NULL
        AND filter_organization IS NULL AND filter_division IS NULL
        AND filter_app_under_test IS NULL AND filter_metadata = '{}';
    grouped text := CASE WHEN unfiltered THEN $sql$
        SELECT c.field, c.kind, c.value, sum(c.passages)::bigint AS passages
        FROM siam_vector_facets c
        WHERE c.collection = ANY ($1) AND c.field = ANY ($7) AND c.passages > 0
        GROUP BY 1, 2, 3$sql$
    ELSE format($sql$
        SELECT x.field, x.kind, x.value, count(*) AS passages
        FROM siam_vectors v
        CROSS JOIN LATERAL knowledge_facet_values(v.source_type, v.source_id, v.metadata) x
        WHERE %s AND x.field = ANY ($7)
        GROUP BY 1, 2, 3$sql$, knowledge_passes_sql(filter_where))
    END;
BEGIN
    RETURN QUERY EXECUTE format($sql$
        WITH grouped AS (%s), ranked AS (
            SELECT g.field, g.kind, g.value, g.passages,
                   row_number() OVER (PARTITION BY g.field
                                      ORDER BY g.passages DESC, g.value COLLATE "C") AS place,
                   count(*) OVER (PARTITION BY g.field) AS distinct_values
            FROM grouped g
        )
        SELECT r.field, r.kind, r.value, r.passages, r.distinct_values
        FROM ranked r WHERE r.place <= $8$sql$, grouped)
    USING searched, filter_source_types, filter_organization, filter_division,
          filter_app_under_test, filter_metadata, facet_fields, facet_limit;
END
$$;
