CREATE OR REPLACE FUNCTION knowledge_index_staged()
RETURNS TABLE (documents integer, passages integer)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    -- writers queue here first, so two of them never wait on each other's rows
    PERFORM 1 FROM knowledge_store_state FOR UPDATE;

    -- a document staged with its dates (read from a store or an export) keeps them;
    -- another is updated now, and created now when it is new
    INSERT INTO knowledge_documents AS k (id, collection, source_type, source_id, title,
        content, metadata, organization, division, app_under_test, content_hash, source,
        created_at, updated_at, acl)
    SELECT d.id, d.collection, d.source_type, d.source_id, d.title, d.content, d.metadata,
           knowledge_text_field(d.metadata, 'organization'),
           knowledge_text_field(d.metadata, 'division'),
           knowledge_text_field(d.metadata, 'app_under_test'), d.content_hash, d.source,
           coalesce(d.created_at, now()), coalesce(d.updated_at, now()), d.acl
    FROM knowledge_staged_documents d
    ON CONFLICT (id) DO UPDATE SET title = excluded.title, content = excluded.content,
        metadata = excluded.metadata, organization = excluded.organization,
        division = excluded.division, app_under_test = excluded.app_under_test,
        content_hash = excluded.content_hash, source = excluded.source, acl = excluded.acl,
        created_at = coalesce((SELECT s.created_at FROM knowledge_staged_documents s
                               WHERE s.id = excluded.id), k.created_at),
        updated_at = excluded.updated_at;

    DELETE FROM siam_vectors v USING knowledge_staged_documents d WHERE v.document_id = d.id;

    INSERT INTO siam_vectors (id, document_id, collection, organization, division,
        app_under_test, source_type, source_id, title, section, chunk_index, chunk_count,
        content, content_hash, embedding, metadata, acl, start_offset, end_offset, page)
    SELECT c.id, d.id, d.collection, knowledge_text_field(d.metadata, 'organization'),
           knowledge_text_field(d.metadata, 'division'),
           knowledge_text_field(d.metadata, 'app_under_test'), d.source_type, d.source_id,
           c.title, c.section, c.chunk_index, c.chunk_count, c.content, c.content_hash,
           c.embedding, d.metadata, d.acl, c.start_offset, c.end_offset, c.page
    FROM knowledge_staged_passages c JOIN knowledge_staged_documents d ON d.id = c.document_id;

    INSERT INTO wiki_documents AS w (id, title, markdown_content, url, app_name, embedding)
    SELECT d.id, d.title, d.content, d.source_id,
           knowledge_text_field(d.metadata, 'app_under_test'), page.embedding
    FROM knowledge_staged_documents d
    LEFT JOIN (SELECT c.document_id, l2_normalize(avg(c.embedding)) AS embedding
               FROM knowledge_staged_passages c
               WHERE c.document_id IN (SELECT s.id FROM knowledge_staged_documents s
                                       WHERE s.source_type = 'wiki')
               GROUP BY c.document_id) page
           ON page.document_id = d.id
    WHERE d.source_type = 'wiki'
    ON CONFLICT (id) DO UPDATE SET title = excluded.title,
        markdown_content = excluded.markdown_content, url = excluded.url,
        app_name = excluded.app_name, embedding = excluded.embedding, updated_at = now();

    RETURN QUERY
    SELECT (SELECT count(*)::integer FROM knowledge_staged_documents),
           (SELECT count(*)::integer FROM knowledge_staged_passages);
    TRUNCATE knowledge_staged_documents, knowledge_staged_passages;
END
$$;
