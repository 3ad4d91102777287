CREATE OR REPLACE FUNCTION search_siam_vectors_text(
    query_text text,
    match_count integer DEFAULT 5,
    filter_source_types text[] DEFAULT NULL,
    filter_organization text DEFAULT NULL,
    filter_division text DEFAULT NULL,
    filter_app_under_test text DEFAULT NULL,
    filter_metadata jsonb DEFAULT '{}',
    filter_collection text DEFAULT 'default',
    filter_where jsonb DEFAULT NULL,
    filter_collections text[] DEFAULT NULL,
    filter_acl text[] DEFAULT NULL,
    filter_acl_rows double precision DEFAULT NULL
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
    chunk_count integer,
    collection text,
    created_at timestamptz,
    updated_at timestamptz
)
LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    searched text[] := coalesce(filter_collections, ARRAY[filter_collection]);
    terms tsquery := knowledge_any_terms(query_text);
    every tsquery := plainto_tsquery('english', query_text);
    bound integer := 2000;
    allowed double precision;
    wide boolean := false;
    passes text;
    columns text := 'v.id, v.document_id, v.content, v.source_type, v.source_id, v.metadata, '
        '%s, v.organization, v.division, v.app_under_test, v.title, v.section, '
        'v.chunk_index, v.chunk_count, v.collection';
BEGIN
    IF filter_where IS NOT NULL THEN  -- the readers' principals join the rest of the tree
        filter_where := knowledge_with_acl(filter_where, filter_acl);
        passes := knowledge_passes_sql(filter_where);
    ELSIF filter_acl IS NOT NULL AND btrim(query_text) <> '' THEN
        -- Principals that let many passages through are tested on each row met (IS
        -- TRUE: a bitmap of the access list's index would list a good share of the
        -- table), and the search ranks as many of theirs as a search for everyone holds:
        -- 2,000 times the share they may read, so it reads about as many rows whatever
        -- the share (and finds them however they lie); never fewer than ten times the
        -- results asked. Few are found through the index, and 2,000 of them ranked.
        -- How many they allow: the caller's estimate (filter_acl_rows) when it gives one.
        allowed := coalesce(filter_acl_rows, knowledge_planned_rows(
            filter_collection => filter_collection,
            filter_where => knowledge_with_acl(NULL, filter_acl),
            filter_collections => filter_collections));
        wide := allowed > knowledge_exact_rows(match_count);
        IF wide THEN
            bound := least(2000, greatest(10 * match_count, ceil(2000 * allowed
                / greatest((SELECT c.reltuples FROM pg_class c
                            WHERE c.oid = 'siam_vectors'::regclass), 1))));
        END IF;
    END IF;
    IF filter_where IS NULL THEN  -- the static queries of before
        IF btrim(query_text) = '' THEN
            RETURN;
        END IF;
        IF numnode(terms) > 0 THEN
            RETURN QUERY
            SELECT m.*,
                   (SELECT d.created_at FROM knowledge_documents d WHERE d.id = m.document_id),
                   (SELECT d.updated_at FROM knowledge_documents d WHERE d.id = m.document_id)
            FROM (
                (
                SELECT v.id, v.document_id, v.content, v.source_type, v.source_id, v.metadata,
                       ts_rank(v.fts, terms)::double precision AS rank, v.organization,
                       v.division, v.app_under_test, v.title, v.section, v.chunk_index,
                       v.chunk_count, v.collection
                FROM siam_vectors v
                 WHERE v.fts @@ every
                   AND v.collection = ANY (searched)
                   AND (filter_source_types IS NULL OR v.source_type = ANY (filter_source_types))
                   AND (filter_organization IS NULL OR v.organization = filter_organization)
                   AND (filter_division IS NULL OR v.division = filter_division)
                   AND (filter_app_under_test IS NULL OR v.app_under_test = filter_app_under_test)
                   AND (filter_metadata = '{}' OR v.metadata @> filter_metadata)
                   AND (filter_acl IS NULL OR CASE
                        WHEN wide THEN knowledge_acl_allows(v.acl, filter_acl) IS TRUE
                        ELSE v.acl && filter_acl END)
                 LIMIT bound)
                UNION ALL
                (
                SELECT v.id, v.document_id, v.content, v.source_type, v.source_id, v.metadata,
                       ts_rank(v.fts, terms)::double precision AS rank, v.organization,
                       v.division, v.app_under_test, v.title, v.section, v.chunk_index,
                       v.chunk_count, v.collection
                FROM siam_vectors v
                 WHERE v.fts @@ terms AND NOT v.fts @@ every
                   AND v.collection = ANY (searched)
                   AND (filter_source_types IS NULL OR v.source_type = ANY (filter_source_types))
                   AND (filter_organization IS NULL OR v.organization = filter_organization)
                   AND (filter_division IS NULL OR v.division = filter_division)
                   AND (filter_app_under_test IS NULL OR v.app_under_test = filter_app_under_test)
                   AND (filter_metadata = '{}' OR v.metadata @> filter_metadata)
                   AND (filter_acl IS NULL OR CASE
                        WHEN wide THEN knowledge_acl_allows(v.acl, filter_acl) IS TRUE
                        ELSE v.acl && filter_acl END)
                 LIMIT bound)
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
               v.chunk_count, v.collection,
               (SELECT d.created_at FROM knowledge_documents d WHERE d.id = v.document_id),
               (SELECT d.updated_at FROM knowledge_documents d WHERE d.id = v.document_id)
        FROM siam_vectors v
        WHERE (v.content ILIKE knowledge_like_pattern(query_text)
               OR v.title ILIKE knowledge_like_pattern(query_text))
          AND v.collection = ANY (searched)
          AND (filter_source_types IS NULL OR v.source_type = ANY (filter_source_types))
          AND (filter_organization IS NULL OR v.organization = filter_organization)
          AND (filter_division IS NULL OR v.division = filter_division)
          AND (filter_app_under_test IS NULL OR v.app_under_test = filter_app_under_test)
          AND (filter_metadata = '{}' OR v.metadata @> filter_metadata)
          AND (filter_acl IS NULL OR CASE
                WHEN wide THEN knowledge_acl_allows(v.acl, filter_acl) IS TRUE
                ELSE v.acl && filter_acl END)
        ORDER BY 7 DESC, v.id
        LIMIT match_count;
        RETURN;
    END IF;
    IF btrim(query_text) = '' THEN
        RETURN;
    END IF;
    IF numnode(terms) > 0 THEN
        RETURN QUERY EXECUTE format($sql$
        SELECT m.*,
               (SELECT d.created_at FROM knowledge_documents d WHERE d.id = m.document_id),
               (SELECT d.updated_at FROM knowledge_documents d WHERE d.id = m.document_id)
        FROM (
            (SELECT %1$s FROM siam_vectors v WHERE v.fts @@ $8 AND %2$s LIMIT 2000)
            UNION ALL
            (SELECT %1$s FROM siam_vectors v
             WHERE v.fts @@ $7 AND NOT v.fts @@ $8 AND %2$s LIMIT 2000)
        ) m
        ORDER BY 7 DESC, 1
        LIMIT $9$sql$, format(columns, 'ts_rank(v.fts, $7)::double precision'), passes)
        USING searched, filter_source_types, filter_organization, filter_division,
              filter_app_under_test, filter_metadata, terms, every, match_count;
        IF FOUND THEN
            RETURN;
        END IF;
    END IF;
    RETURN QUERY EXECUTE format($sql$
    SELECT %1$s,
           (SELECT d.created_at FROM knowledge_documents d WHERE d.id = v.document_id),
           (SELECT d.updated_at FROM knowledge_documents d WHERE d.id = v.document_id)
    FROM siam_vectors v
    WHERE (v.content ILIKE knowledge_like_pattern($7) OR v.title ILIKE knowledge_like_pattern($7))
      AND %2$s
    ORDER BY 7 DESC, v.id
    LIMIT $8$sql$,
        format(columns, '(CASE WHEN v.title ILIKE knowledge_like_pattern($7) '
            'THEN 0.002 ELSE 0.001 END)::double precision'), passes)
    USING searched, filter_source_types, filter_organization, filter_division,
          filter_app_under_test, filter_metadata, query_text, match_count;
END;
$$;
