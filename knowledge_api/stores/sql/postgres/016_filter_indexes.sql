-- Each number and each ISO 8601 date among a passage's metadata values as a row of its
-- own, typed and indexed by key and value, so a range filter finds its passages through
-- an index instead of reading (and, for a date, parsing) the metadata of every passage:
-- at 20,000 passages a date range read them all and added 180 ms to a search. Triggers
-- keep the rows with their passages, whoever writes (the store, a bulk load, plain SQL).
CREATE TABLE siam_vector_values (
    id uuid NOT NULL,      -- the passage (siam_vectors.id)
    key text NOT NULL,
    number numeric,        -- a JSON number
    ms bigint              -- a text that is an ISO 8601 date, as epoch milliseconds
);
ALTER TABLE siam_vector_values ENABLE ROW LEVEL SECURITY;

-- A passage's metadata values that are numbers or dates, typed.
\ir functions/knowledge_typed_values.sql

\ir functions/knowledge_record_values.sql
CREATE TRIGGER siam_vectors_inserted_values
    AFTER INSERT ON siam_vectors REFERENCING NEW TABLE AS new_passages
    FOR EACH STATEMENT EXECUTE FUNCTION knowledge_record_values();
CREATE TRIGGER siam_vectors_updated_values
    AFTER UPDATE ON siam_vectors REFERENCING OLD TABLE AS old_passages NEW TABLE AS new_passages
    FOR EACH STATEMENT EXECUTE FUNCTION knowledge_record_values();
CREATE TRIGGER siam_vectors_deleted_values
    AFTER DELETE ON siam_vectors REFERENCING OLD TABLE AS old_passages
    FOR EACH STATEMENT EXECUTE FUNCTION knowledge_record_values();
CREATE TRIGGER siam_vectors_truncated_values
    AFTER TRUNCATE ON siam_vectors FOR EACH STATEMENT EXECUTE FUNCTION knowledge_record_values();

-- The passages written before.
INSERT INTO siam_vector_values (id, key, number, ms)
SELECT p.id, t.key, t.number, t.ms
FROM siam_vectors p CROSS JOIN LATERAL knowledge_typed_values(p.metadata) t;
CREATE INDEX siam_vector_values_number ON siam_vector_values (key, number, id)
    WHERE number IS NOT NULL;
CREATE INDEX siam_vector_values_ms ON siam_vector_values (key, ms, id) WHERE ms IS NOT NULL;
CREATE INDEX siam_vector_values_passage ON siam_vector_values (id);
-- How many rows a key's range holds, estimated for the key and its values together (the
-- planner's choice between an exact and a graph search below rests on it): apart, a
-- range of one key among two was estimated at 900 rows for 2,000.
CREATE STATISTICS siam_vector_values_key_number (mcv) ON key, number FROM siam_vector_values;
CREATE STATISTICS siam_vector_values_key_ms (mcv) ON key, ms FROM siam_vector_values;
ANALYZE siam_vector_values;

-- A range on a metadata field is a lookup in siam_vector_values, all the bounds an
-- `$and` sets on one field in one lookup.
-- Replaced in 022_document_acl: the current text is functions/knowledge_filter_sql.sql.
CREATE OR REPLACE FUNCTION knowledge_filter_sql(tree jsonb) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    op text := tree ->> 'op';
    field text := tree ->> 'field';
    kind text := tree ->> 'kind';
    own boolean := coalesce((tree ->> 'own')::boolean, false);
    target text;
    parts text[];
BEGIN
    IF op = '$and' THEN  -- the ranges of one metadata field: one lookup with every bound
        SELECT array_agg('(' || knowledge_filter_sql(test) || ')') INTO parts
        FROM (
            SELECT part AS test FROM jsonb_array_elements(tree -> 'parts') AS part
            WHERE NOT (part ->> 'op' IN ('$gt', '$gte', '$lt', '$lte')
                       AND NOT coalesce((part ->> 'own')::boolean, false))
            UNION ALL
            SELECT jsonb_build_object('op', '$range', 'field', part ->> 'field',
                                      'kind', part ->> 'kind', 'bounds', jsonb_agg(part))
            FROM jsonb_array_elements(tree -> 'parts') AS part
            WHERE part ->> 'op' IN ('$gt', '$gte', '$lt', '$lte')
              AND NOT coalesce((part ->> 'own')::boolean, false)
            GROUP BY part ->> 'field', part ->> 'kind'
        ) tests;
        RETURN array_to_string(parts, ' AND ');
    ELSIF op = '$or' THEN
        SELECT array_agg('(' || knowledge_filter_sql(part) || ')') INTO parts
        FROM jsonb_array_elements(tree -> 'parts') AS part;
        RETURN array_to_string(parts, ' OR ');
    ELSIF op = '$not' THEN
        RETURN 'NOT (' || knowledge_filter_sql(tree -> 'part') || ')';
    ELSIF op = '$const' THEN
        RETURN CASE WHEN (tree ->> 'value')::boolean THEN 'true' ELSE 'false' END;
    END IF;
    IF own THEN
        target := CASE field
            WHEN 'source_type' THEN 'v.source_type'
            WHEN 'source_id' THEN 'v.source_id'
            WHEN 'created_at' THEN
                'knowledge_ms((SELECT d.created_at FROM knowledge_documents d WHERE d.id = v.document_id))'
            WHEN 'updated_at' THEN
                'knowledge_ms((SELECT d.updated_at FROM knowledge_documents d WHERE d.id = v.document_id))'
        END;
        IF target IS NULL THEN
            RAISE EXCEPTION 'knowledge_filter_sql: unknown field %', field;
        END IF;
        IF field IN ('source_type', 'source_id') AND kind = 'date' THEN
            target := format('knowledge_instant_ms(%s)', target);
        END IF;
        RETURN CASE op
            WHEN '$in' THEN format('coalesce(%s = ANY (%L::%s[]), false)', target,
                (SELECT array_agg(x) FROM jsonb_array_elements_text(tree -> 'values') x),
                CASE WHEN kind = 'date' THEN 'bigint' ELSE 'text' END)
            WHEN '$contains' THEN format('strpos('' '' || %s || '' '', %L) > 0', target,
                ' ' || (tree ->> 'value') || ' ')
            WHEN '$gt' THEN format('coalesce(%s > %L::bigint, false)', target, tree ->> 'value')
            WHEN '$gte' THEN format('coalesce(%s >= %L::bigint, false)', target, tree ->> 'value')
            WHEN '$lt' THEN format('coalesce(%s < %L::bigint, false)', target, tree ->> 'value')
            WHEN '$lte' THEN format('coalesce(%s <= %L::bigint, false)', target, tree ->> 'value')
        END;
    END IF;
    IF op = '$in' THEN
        SELECT array_agg(format('v.metadata @> %L::jsonb', jsonb_build_object(field, x))) INTO parts
        FROM jsonb_array_elements(tree -> 'values') x;
        RETURN '(' || array_to_string(parts, ' OR ') || ')';
    ELSIF op = '$exists' THEN
        RETURN format('%sjsonb_exists(v.metadata, %L)',
            CASE WHEN (tree ->> 'value')::boolean THEN '' ELSE 'NOT ' END, field);
    ELSIF op = '$contains' THEN
        RETURN format('CASE WHEN jsonb_typeof(v.metadata -> %1$L) = ''string'' '
            'THEN strpos('' '' || (v.metadata ->> %1$L) || '' '', %2$L) > 0 ELSE false END',
            field, ' ' || (tree ->> 'value') || ' ');
    ELSIF op IN ('$gt', '$gte', '$lt', '$lte') THEN
        RETURN knowledge_filter_sql(jsonb_build_object('op', '$range', 'field', field,
            'kind', kind, 'bounds', jsonb_build_array(tree)));
    ELSIF op = '$range' THEN  -- never NULL: an id is in the lookup's ids or not
        SELECT string_agg(format('x.%s %s %L::%s',
                   CASE WHEN kind = 'date' THEN 'ms' ELSE 'number' END,
                   CASE b ->> 'op' WHEN '$gt' THEN '>' WHEN '$gte' THEN '>='
                                   WHEN '$lt' THEN '<' ELSE '<=' END,
                   b ->> 'value',
                   CASE WHEN kind = 'date' THEN 'bigint' ELSE 'numeric' END), ' AND ')
        INTO target
        FROM jsonb_array_elements(tree -> 'bounds') AS b;
        RETURN format('v.id IN (SELECT x.id FROM siam_vector_values x WHERE x.key = %L AND %s)',
            field, target);
    END IF;
    RAISE EXCEPTION 'knowledge_filter_sql: unknown operator %', op;
END
$$;

-- How many passages of each collection hold each value of each field, kept by triggers
-- too, so the facets of a search with no filter (every passage of its collection) are
-- read, not counted: at 20,000 passages counting them took 30 ms, at 200,000 ten times
-- that. A field is the passage's source_type or source_id, or a metadata key whose value
-- is a string, a number or a boolean (the value as its JSON text).
CREATE TABLE siam_vector_facets (
    collection text NOT NULL,
    field text NOT NULL,
    kind text NOT NULL,
    value text NOT NULL,
    passages bigint NOT NULL,
    PRIMARY KEY (collection, field, kind, value)
);
CREATE INDEX siam_vector_facets_emptied ON siam_vector_facets (collection) WHERE passages = 0;
ALTER TABLE siam_vector_facets ENABLE ROW LEVEL SECURITY;

-- A passage's fields and their values, as facets count them.
\ir functions/knowledge_facet_values.sql

\ir functions/knowledge_count_facets.sql
CREATE TRIGGER siam_vectors_inserted_facets
    AFTER INSERT ON siam_vectors REFERENCING NEW TABLE AS new_passages
    FOR EACH STATEMENT EXECUTE FUNCTION knowledge_count_facets();
CREATE TRIGGER siam_vectors_updated_facets
    AFTER UPDATE ON siam_vectors REFERENCING OLD TABLE AS old_passages NEW TABLE AS new_passages
    FOR EACH STATEMENT EXECUTE FUNCTION knowledge_count_facets();
CREATE TRIGGER siam_vectors_deleted_facets
    AFTER DELETE ON siam_vectors REFERENCING OLD TABLE AS old_passages
    FOR EACH STATEMENT EXECUTE FUNCTION knowledge_count_facets();
CREATE TRIGGER siam_vectors_truncated_facets
    AFTER TRUNCATE ON siam_vectors FOR EACH STATEMENT EXECUTE FUNCTION knowledge_count_facets();

INSERT INTO siam_vector_facets (collection, field, kind, value, passages)
SELECT v.collection, t.field, t.kind, t.value, count(*)
FROM siam_vectors v
CROSS JOIN LATERAL knowledge_facet_values(v.source_type, v.source_id, v.metadata) t
GROUP BY 1, 2, 3, 4;
ANALYZE siam_vector_facets;

-- The WHERE expression of the search functions' filter arguments ($1 to $6 and the
-- filter tree), over siam_vectors `v`.
-- Replaced in 021_collection_union: the current text is functions/knowledge_passes_sql.sql.
CREATE OR REPLACE FUNCTION knowledge_passes_sql(filter_where jsonb) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT format($sql$v.collection = $1
              AND ($2 IS NULL OR v.source_type = ANY ($2))
              AND ($3 IS NULL OR v.organization = $3)
              AND ($4 IS NULL OR v.division = $4)
              AND ($5 IS NULL OR v.app_under_test = $5)
              AND ($6 = '{}' OR v.metadata @> $6)
              AND (%s)$sql$,
        CASE WHEN filter_where IS NULL THEN 'true' ELSE knowledge_filter_sql(filter_where) END)
$$;

-- A vector search whose filters the planner expects to let few passages through
-- measures their distances exactly instead of walking the HNSW graph for them; the
-- planner's estimate comes from an EXPLAIN of the filters alone.
-- Replaced in 021_collection_union: the current text is functions/knowledge_planned_rows.sql.
CREATE OR REPLACE FUNCTION knowledge_planned_rows(
    filter_source_types text[] DEFAULT NULL,
    filter_organization text DEFAULT NULL,
    filter_division text DEFAULT NULL,
    filter_app_under_test text DEFAULT NULL,
    filter_metadata jsonb DEFAULT '{}',
    filter_collection text DEFAULT 'default',
    filter_where jsonb DEFAULT NULL
) RETURNS double precision
LANGUAGE plpgsql VOLATILE  -- EXPLAIN runs only in a volatile function; it writes nothing
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    plan json;
BEGIN
    EXECUTE 'EXPLAIN (FORMAT JSON) SELECT 1 FROM siam_vectors v WHERE '
        || knowledge_passes_sql(filter_where) INTO plan
    USING filter_collection, filter_source_types, filter_organization, filter_division,
          filter_app_under_test, filter_metadata;
    RETURN (plan -> 0 -> 'Plan' ->> 'Plan Rows')::double precision;
END
$$;
-- Replaced in 021_collection_union: the current text is functions/match_siam_vectors_gemini.sql.
CREATE OR REPLACE FUNCTION match_siam_vectors_gemini(
    query_embedding vector,
    match_threshold double precision DEFAULT 0.2,
    match_count integer DEFAULT 5,
    filter_source_types text[] DEFAULT NULL,
    filter_organization text DEFAULT NULL,
    filter_division text DEFAULT NULL,
    filter_app_under_test text DEFAULT NULL,
    filter_metadata jsonb DEFAULT '{}',
    filter_collection text DEFAULT 'default',
    ef_search integer DEFAULT 100,
    filter_where jsonb DEFAULT NULL
) RETURNS TABLE (
    id uuid,
    document_id uuid,
    content text,
    source_type text,
    source_id text,
    metadata jsonb,
    similarity double precision,
    organization text,
    division text,
    app_under_test text,
    title text,
    section text,
    chunk_index integer,
    chunk_count integer,
    created_at timestamptz,
    updated_at timestamptz
)
LANGUAGE plpgsql STABLE
SET hnsw.ef_search = 100
SET hnsw.iterative_scan = strict_order
SET plan_cache_mode = force_custom_plan
AS $$
#variable_conflict use_column
DECLARE
    passes text := knowledge_passes_sql(filter_where);
BEGIN
    PERFORM set_config('hnsw.ef_search', ef_search::text, true);
    IF filter_where IS NULL AND filter_source_types IS NULL AND filter_organization IS NULL
       AND filter_division IS NULL AND filter_app_under_test IS NULL AND filter_metadata = '{}' THEN
        RETURN QUERY
        SELECT nearest.id, nearest.document_id, nearest.content, nearest.source_type,
               nearest.source_id, nearest.metadata, 1 - nearest.distance, nearest.organization,
               nearest.division, nearest.app_under_test, nearest.title, nearest.section,
               nearest.chunk_index, nearest.chunk_count,
               (SELECT d.created_at FROM knowledge_documents d WHERE d.id = nearest.document_id),
               (SELECT d.updated_at FROM knowledge_documents d WHERE d.id = nearest.document_id)
        FROM (
            SELECT v.id, v.document_id, v.content, v.source_type, v.source_id, v.metadata,
                   v.embedding <=> query_embedding AS distance, v.organization, v.division,
                   v.app_under_test, v.title, v.section, v.chunk_index, v.chunk_count
            FROM siam_vectors v
            WHERE v.collection = filter_collection
              AND (filter_source_types IS NULL OR v.source_type = ANY (filter_source_types))
              AND (filter_organization IS NULL OR v.organization = filter_organization)
              AND (filter_division IS NULL OR v.division = filter_division)
              AND (filter_app_under_test IS NULL OR v.app_under_test = filter_app_under_test)
              AND (filter_metadata = '{}' OR v.metadata @> filter_metadata)
            ORDER BY v.embedding <=> query_embedding
            LIMIT match_count
        ) nearest
        WHERE 1 - nearest.distance > match_threshold
        ORDER BY nearest.distance;
        RETURN;
    END IF;
    -- The passages a filter lets through, when the planner expects few, are measured
    -- exactly (OFFSET 0 keeps the HNSW index out of it): an HNSW scan walks the graph
    -- past about N/allowed passages for each one that passes (and may stop short), an
    -- exact one reads each allowed passage's vector once. The costs meet near
    -- allowed = sqrt(6 k N) (k results of N passages: 3,500 at 200,000 for 10).
    RETURN QUERY EXECUTE format($sql$
        SELECT nearest.id, nearest.document_id, nearest.content, nearest.source_type,
               nearest.source_id, nearest.metadata, 1 - nearest.distance, nearest.organization,
               nearest.division, nearest.app_under_test, nearest.title, nearest.section,
               nearest.chunk_index, nearest.chunk_count,
               (SELECT d.created_at FROM knowledge_documents d WHERE d.id = nearest.document_id),
               (SELECT d.updated_at FROM knowledge_documents d WHERE d.id = nearest.document_id)
        FROM (
            SELECT v.id, v.document_id, v.content, v.source_type, v.source_id, v.metadata,
                   v.embedding <=> $7 AS distance, v.organization, v.division,
                   v.app_under_test, v.title, v.section, v.chunk_index, v.chunk_count
            FROM siam_vectors v
            WHERE %s
            %s
        ) nearest
        WHERE 1 - nearest.distance > $9
        ORDER BY nearest.distance
        LIMIT $8$sql$, passes,
        CASE WHEN knowledge_planned_rows(filter_source_types, filter_organization,
                      filter_division, filter_app_under_test, filter_metadata,
                      filter_collection, filter_where)
                  <= sqrt(6.0 * match_count * greatest((SELECT c.reltuples FROM pg_class c
                                                        WHERE c.oid = 'siam_vectors'::regclass), 0))
             THEN 'OFFSET 0' ELSE 'ORDER BY v.embedding <=> $7 LIMIT $8' END)
    USING filter_collection, filter_source_types, filter_organization, filter_division,
          filter_app_under_test, filter_metadata, query_embedding, match_count, match_threshold;
END
$$;

-- Facets with no filter read the counts; with one, count the passages it lets through.
-- Replaced in 021_collection_union: the current text is functions/knowledge_facets.sql.
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
DECLARE
    unfiltered boolean := filter_where IS NULL AND filter_source_types IS NULL
        AND filter_organization IS NULL AND filter_division IS NULL
        AND filter_app_under_test IS NULL AND filter_metadata = '{}';
    grouped text := CASE WHEN unfiltered THEN $sql$
        SELECT c.field, c.kind, c.value, c.passages FROM siam_vector_facets c
        WHERE c.collection = $1 AND c.field = ANY ($7) AND c.passages > 0$sql$
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
    USING filter_collection, filter_source_types, filter_organization, filter_division,
          filter_app_under_test, filter_metadata, facet_fields, facet_limit;
END
$$;

NOTIFY pgrst, 'reload schema';
