CREATE OR REPLACE FUNCTION knowledge_count_facets() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    changed text := concat_ws(' UNION ALL ',
        CASE WHEN TG_OP <> 'DELETE' THEN
            'SELECT collection, source_type, source_id, metadata, 1 AS n FROM new_passages' END,
        CASE WHEN TG_OP <> 'INSERT' THEN
            'SELECT collection, source_type, source_id, metadata, -1 AS n FROM old_passages' END);
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        TRUNCATE siam_vector_facets;
        RETURN NULL;
    END IF;
    EXECUTE format($sql$
        INSERT INTO siam_vector_facets AS f (collection, field, kind, value, passages)
        SELECT c.collection, t.field, t.kind, t.value, sum(c.n)
        FROM (%s) c
        CROSS JOIN LATERAL knowledge_facet_values(c.source_type, c.source_id, c.metadata) t
        GROUP BY 1, 2, 3, 4
        HAVING sum(c.n) <> 0
        ORDER BY 1, 2, 3, 4
        ON CONFLICT (collection, field, kind, value)
        DO UPDATE SET passages = f.passages + excluded.passages$sql$, changed);
    IF TG_OP <> 'INSERT' THEN
        DELETE FROM siam_vector_facets WHERE passages = 0;
    END IF;
    RETURN NULL;
END;
$$;
