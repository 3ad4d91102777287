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
    ELSIF op = '$acl' THEN  -- the passage's access list holds one of the principals
        RETURN format('v.acl && %L::text[]',
            (SELECT array_agg(x) FROM jsonb_array_elements_text(tree -> 'values') x));
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
