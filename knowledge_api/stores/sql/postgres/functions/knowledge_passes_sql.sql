CREATE OR REPLACE FUNCTION knowledge_passes_sql(filter_where jsonb) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT format($sql$v.collection = ANY ($1)
              AND ($2 IS NULL OR v.source_type = ANY ($2))
              AND ($3 IS NULL OR v.organization = $3)
              AND ($4 IS NULL OR v.division = $4)
              AND ($5 IS NULL OR v.app_under_test = $5)
              AND ($6 = '{}' OR v.metadata @> $6)
              AND (%s)$sql$,
        CASE WHEN filter_where IS NULL THEN 'true' ELSE knowledge_filter_sql(filter_where) END)
$$;
