-- The filter language (field -> value or {operator: value}, $and/$or/$not) inside the
-- search functions, so a filter is applied in the query, before its LIMIT, by Postgres
-- and through PostgREST alike. The caller sends the filter tree as JSON (`filter_where`,
-- normalised: $ne and $nin arrive as $not of $eq/$in, tests no value can pass as
-- constants); `knowledge_filter_sql` writes it as a WHERE expression whose every value
-- is quoted as a literal, and the search runs it. Without a tree the searches are the
-- static queries they were.

-- Whether a text is an ISO 8601 date the filter language reads as an instant (a valid
-- day, hour, minute, second and offset), without raising on any text.
\ir functions/knowledge_is_instant.sql

-- Milliseconds since the epoch of an ISO 8601 date held as text (a bare date: midnight
-- UTC; no offset: UTC); NULL when the text is not such a date. Plain SQL the planner
-- inlines into the scan (stable, as the text-to-timestamptz cast it holds: a function
-- declared immutable around it is called row by row instead).
\ir functions/knowledge_instant_ms.sql

\ir functions/knowledge_ms.sql

-- A filter tree as a boolean expression over siam_vectors `v`; every test is true or
-- false, never NULL, so NOT is the complement (a passage without the field passes it).
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
    IF op IN ('$and', '$or') THEN
        SELECT array_agg('(' || knowledge_filter_sql(part) || ')') INTO parts
        FROM jsonb_array_elements(tree -> 'parts') AS part;
        RETURN array_to_string(parts, CASE WHEN op = '$and' THEN ' AND ' ELSE ' OR ' END);
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
        RETURN format('CASE WHEN jsonb_typeof(v.metadata -> %1$L) = %2$L '
            'THEN coalesce(%3$s %4$s %5$L::%6$s, false) ELSE false END',
            field,
            CASE WHEN kind = 'date' THEN 'string' ELSE 'number' END,
            CASE WHEN kind = 'date' THEN format('knowledge_instant_ms(v.metadata ->> %L)', field)
                 ELSE format('(v.metadata ->> %L)::numeric', field) END,
            CASE op WHEN '$gt' THEN '>' WHEN '$gte' THEN '>=' WHEN '$lt' THEN '<' ELSE '<=' END,
            tree ->> 'value',
            CASE WHEN kind = 'date' THEN 'bigint' ELSE 'numeric' END);
    END IF;
    RAISE EXCEPTION 'knowledge_filter_sql: unknown operator %', op;
END
$$;

DROP FUNCTION match_siam_vectors_gemini(vector, double precision, integer, text[], text, text,
    text, jsonb, text, integer);
-- Replaced in 015_search_dates (then 016_filter_indexes): the current text is functions/match_siam_vectors_gemini.sql.
CREATE FUNCTION match_siam_vectors_gemini(
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
    chunk_count integer
)
LANGUAGE plpgsql STABLE
SET hnsw.ef_search = 100
SET hnsw.iterative_scan = strict_order
SET plan_cache_mode = force_custom_plan
AS $$
#variable_conflict use_column
BEGIN
    PERFORM set_config('hnsw.ef_search', ef_search::text, true);
    IF filter_where IS NULL THEN
        RETURN QUERY
        SELECT nearest.id, nearest.document_id, nearest.content, nearest.source_type,
               nearest.source_id, nearest.metadata, 1 - nearest.distance, nearest.organization,
               nearest.division, nearest.app_under_test, nearest.title, nearest.section,
               nearest.chunk_index, nearest.chunk_count
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
    RETURN QUERY EXECUTE format($sql$
        SELECT nearest.id, nearest.document_id, nearest.content, nearest.source_type,
               nearest.source_id, nearest.metadata, 1 - nearest.distance, nearest.organization,
               nearest.division, nearest.app_under_test, nearest.title, nearest.section,
               nearest.chunk_index, nearest.chunk_count
        FROM (
            SELECT v.id, v.document_id, v.content, v.source_type, v.source_id, v.metadata,
                   v.embedding <=> $7 AS distance, v.organization, v.division,
                   v.app_under_test, v.title, v.section, v.chunk_index, v.chunk_count
            FROM siam_vectors v
            WHERE v.collection = $1
              AND ($2 IS NULL OR v.source_type = ANY ($2))
              AND ($3 IS NULL OR v.organization = $3)
              AND ($4 IS NULL OR v.division = $4)
              AND ($5 IS NULL OR v.app_under_test = $5)
              AND ($6 = '{}' OR v.metadata @> $6)
              AND (%s)
            ORDER BY v.embedding <=> $7
            LIMIT $8
        ) nearest
        WHERE 1 - nearest.distance > $9
        ORDER BY nearest.distance$sql$, knowledge_filter_sql(filter_where))
    USING filter_collection, filter_source_types, filter_organization, filter_division,
          filter_app_under_test, filter_metadata, query_embedding, match_count, match_threshold;
END
$$;

DROP FUNCTION search_siam_vectors_text(text, integer, text[], text, text, text, jsonb, text);
-- Replaced in 015_search_dates: the current text is functions/search_siam_vectors_text.sql.
CREATE FUNCTION search_siam_vectors_text(
    query_text text,
    match_count integer DEFAULT 5,
    filter_source_types text[] DEFAULT NULL,
    filter_organization text DEFAULT NULL,
    filter_division text DEFAULT NULL,
    filter_app_under_test text DEFAULT NULL,
    filter_metadata jsonb DEFAULT '{}',
    filter_collection text DEFAULT 'default',
    filter_where jsonb DEFAULT NULL
) RETURNS TABLE (
    id uuid,
    document_id uuid,
    content text,
    source_type text,
    source_id text,
    metadata jsonb,
    rank double precision,
    organization text,
    division text,
    app_under_test text,
    title text,
    section text,
    chunk_index integer,
    chunk_count integer
)
LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    terms tsquery := knowledge_any_terms(query_text);
    every tsquery := plainto_tsquery('english', query_text);
    condition text := CASE WHEN filter_where IS NULL THEN 'true'
                           ELSE knowledge_filter_sql(filter_where) END;
    passes text := format($sql$ v.collection = $1
               AND ($2 IS NULL OR v.source_type = ANY ($2))
               AND ($3 IS NULL OR v.organization = $3)
               AND ($4 IS NULL OR v.division = $4)
               AND ($5 IS NULL OR v.app_under_test = $5)
               AND ($6 = '{}' OR v.metadata @> $6)
               AND (%s) $sql$, condition);
    columns text := 'v.id, v.document_id, v.content, v.source_type, v.source_id, v.metadata, '
        '%s, v.organization, v.division, v.app_under_test, v.title, v.section, '
        'v.chunk_index, v.chunk_count';
BEGIN
    IF filter_where IS NULL THEN  -- the static queries of before
        IF btrim(query_text) = '' THEN
            RETURN;
        END IF;
        IF numnode(terms) > 0 THEN
            RETURN QUERY
            SELECT m.* FROM (
                (
                SELECT v.id, v.document_id, v.content, v.source_type, v.source_id, v.metadata,
                       ts_rank(v.fts, terms)::double precision AS rank, v.organization,
                       v.division, v.app_under_test, v.title, v.section, v.chunk_index,
                       v.chunk_count
                FROM siam_vectors v
                 WHERE v.fts @@ every
                   AND v.collection = filter_collection
                   AND (filter_source_types IS NULL OR v.source_type = ANY (filter_source_types))
                   AND (filter_organization IS NULL OR v.organization = filter_organization)
                   AND (filter_division IS NULL OR v.division = filter_division)
                   AND (filter_app_under_test IS NULL OR v.app_under_test = filter_app_under_test)
                   AND (filter_metadata = '{}' OR v.metadata @> filter_metadata)
                 LIMIT 2000)
                UNION ALL
                (
                SELECT v.id, v.document_id, v.content, v.source_type, v.source_id, v.metadata,
                       ts_rank(v.fts, terms)::double precision AS rank, v.organization,
                       v.division, v.app_under_test, v.title, v.section, v.chunk_index,
                       v.chunk_count
                FROM siam_vectors v
                 WHERE v.fts @@ terms AND NOT v.fts @@ every
                   AND v.collection = filter_collection
                   AND (filter_source_types IS NULL OR v.source_type = ANY (filter_source_types))
                   AND (filter_organization IS NULL OR v.organization = filter_organization)
                   AND (filter_division IS NULL OR v.division = filter_division)
                   AND (filter_app_under_test IS NULL OR v.app_under_test = filter_app_under_test)
                   AND (filter_metadata = '{}' OR v.metadata @> filter_metadata)
                 LIMIT 2000)
            ) m
            ORDER BY 7 DESC, 1
            LIMIT match_count;
            IF FOUND THEN
                RETURN;
            END IF;
        END IF;
        RETURN QUERY
        SELECT v.id, v.document_id, v.content, v.source_type, v.source_id, v.metadata,
               (CASE WHEN v.title ILIKE knowledge_like_pattern(query_text) THEN 0.002 ELSE 0.001 END)::double precision,
               v.organization, v.division, v.app_under_test, v.title, v.section, v.chunk_index,
               v.chunk_count
        FROM siam_vectors v
        WHERE (v.content ILIKE knowledge_like_pattern(query_text)
               OR v.title ILIKE knowledge_like_pattern(query_text))
          AND v.collection = filter_collection
          AND (filter_source_types IS NULL OR v.source_type = ANY (filter_source_types))
          AND (filter_organization IS NULL OR v.organization = filter_organization)
          AND (filter_division IS NULL OR v.division = filter_division)
          AND (filter_app_under_test IS NULL OR v.app_under_test = filter_app_under_test)
          AND (filter_metadata = '{}' OR v.metadata @> filter_metadata)
        ORDER BY 7 DESC, v.id
        LIMIT match_count;
        RETURN;
    END IF;
    IF btrim(query_text) = '' THEN
        RETURN;
    END IF;
    IF numnode(terms) > 0 THEN
        RETURN QUERY EXECUTE format($sql$
        SELECT m.* FROM (
            (SELECT %1$s FROM siam_vectors v WHERE v.fts @@ $8 AND %2$s LIMIT 2000)
            UNION ALL
            (SELECT %1$s FROM siam_vectors v
             WHERE v.fts @@ $7 AND NOT v.fts @@ $8 AND %2$s LIMIT 2000)
        ) m
        ORDER BY 7 DESC, 1
        LIMIT $9$sql$, format(columns, 'ts_rank(v.fts, $7)::double precision'), passes)
        USING filter_collection, filter_source_types, filter_organization, filter_division,
              filter_app_under_test, filter_metadata, terms, every, match_count;
        IF FOUND THEN
            RETURN;
        END IF;
    END IF;
    RETURN QUERY EXECUTE format($sql$
    SELECT %1$s FROM siam_vectors v
    WHERE (v.content ILIKE knowledge_like_pattern($7) OR v.title ILIKE knowledge_like_pattern($7))
      AND %2$s
    ORDER BY 7 DESC, v.id
    LIMIT $8$sql$,
        format(columns, '(CASE WHEN v.title ILIKE knowledge_like_pattern($7) '
            'THEN 0.002 ELSE 0.001 END)::double precision'), passes)
    USING filter_collection, filter_source_types, filter_organization, filter_division,
          filter_app_under_test, filter_metadata, query_text, match_count;
END;
$$;

NOTIFY pgrst, 'reload schema';
