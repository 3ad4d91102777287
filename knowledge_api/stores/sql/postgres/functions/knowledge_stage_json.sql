CREATE OR REPLACE FUNCTION knowledge_stage_json(staged jsonb) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM knowledge_stage_documents();
    INSERT INTO knowledge_staged_documents
    SELECT d.id, d.collection, d.source_type, d.source_id, d.title, d.content, d.metadata,
           d.content_hash, coalesce(d.source, ''), d.created_at, d.updated_at,
           coalesce(d.acl, '{public}')
    FROM jsonb_to_recordset(staged) AS d(id uuid, collection text, source_type text,
        source_id text, title text, content text, metadata jsonb, content_hash text,
        source text, created_at timestamptz, updated_at timestamptz, acl text[]);
    INSERT INTO knowledge_staged_passages
    SELECT c.id, d.id, c.chunk_index, c.chunk_count, c.title, c.section, c.content,
           c.content_hash, c.embedding, c.start_offset, c.end_offset, c.page
    FROM jsonb_to_recordset(staged) AS d(id uuid, chunks jsonb),
        jsonb_to_recordset(d.chunks) AS c(id uuid, chunk_index integer, chunk_count integer,
        title text, section text, content text, content_hash text, embedding vector,
        start_offset integer, end_offset integer, page integer);
END
$$;
