-- Facets: how many passages of a search's match set hold each value of a field, counted
-- in one query over the passages the search's filters let through (the same arguments
-- as the search functions), each field cut to its `facet_limit` most frequent values,
-- with the number of distinct values it holds in all. A field is a metadata key, or
-- the passage's own source_type or source_id; values that are lists or objects are not
-- counted. Numbers come back as their JSON text (12 and 12.0 are two groups here: the
-- caller counts them as one value).
CREATE OR REPLACE FUNCTION knowledge_facets(
    facet_fields text[],
    facet_limit integer DEFAULT 100,
    filter_source_types text[] DEFAULT NULL,
    filter_organization text DEFAULT NULL,
    filter_division text DEFAULT NULL,
    filter_app_under_test text DEFAULT NULL,
    filter_metadata jsonb DEFAULT '{}',
    filter_collection text DEFAULT 'default',
    filter_where jsonb DEFAULT NULL
) RETURNS TABLE (field text, kind text, value text, passages bigint, distinct_values bigint)
LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_custom_plan
AS $$
BEGIN
    RETURN QUERY EXECUTE format($sql$
        WITH matched AS MATERIALIZED (
            SELECT v.source_type, v.source_id, v.metadata FROM siam_vectors v
            WHERE v.collection = $1
              AND ($2 IS NULL OR v.source_type = ANY ($2))
              AND ($3 IS NULL OR v.organization = $3)
              AND ($4 IS NULL OR v.division = $4)
              AND ($5 IS NULL OR v.app_under_test = $5)
              AND ($6 = '{}' OR v.metadata @> $6)
              AND (%s)
        ), grouped AS (
            SELECT f.name AS field, x.kind, x.value, count(*) AS passages
            FROM matched m
            CROSS JOIN unnest($7::text[]) AS f(name)
            CROSS JOIN LATERAL (
                SELECT CASE WHEN f.name IN ('source_type', 'source_id') THEN 'string'
                            ELSE jsonb_typeof(m.metadata -> f.name) END AS kind,
                       CASE f.name WHEN 'source_type' THEN m.source_type
                                   WHEN 'source_id' THEN m.source_id
                                   ELSE m.metadata ->> f.name END AS value
            ) x
            WHERE x.kind IN ('string', 'number', 'boolean')
            GROUP BY 1, 2, 3
        ), ranked AS (
            SELECT g.field, g.kind, g.value, g.passages,
                   row_number() OVER (PARTITION BY g.field
                                      ORDER BY g.passages DESC, g.value COLLATE "C") AS place,
                   count(*) OVER (PARTITION BY g.field) AS distinct_values
            FROM grouped g
        )
        SELECT r.field, r.kind, r.value, r.passages, r.distinct_values
        FROM ranked r WHERE r.place <= $8$sql$,
        CASE WHEN filter_where IS NULL THEN 'true' ELSE knowledge_filter_sql(filter_where) END)
    USING filter_collection, filter_source_types, filter_organization, filter_division,
          filter_app_under_test, filter_metadata, facet_fields, facet_limit;
END
$$;

NOTIFY pgrst, 'reload schema';
