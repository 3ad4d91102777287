CREATE OR REPLACE FUNCTION knowledge_stage_documents() RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    CREATE TEMP TABLE IF NOT EXISTS knowledge_staged_documents (
        id uuid NOT NULL,
        collection text NOT NULL,
        source_type text NOT NULL,
        source_id text NOT NULL,
        title text NOT NULL,
        content text NOT NULL,
        metadata jsonb NOT NULL,
        content_hash text NOT NULL,
        source text NOT NULL DEFAULT '',
        created_at timestamptz,
        updated_at timestamptz,
        acl text[] NOT NULL DEFAULT '{public}'
    ) ON COMMIT DROP;
    CREATE TEMP TABLE IF NOT EXISTS knowledge_staged_passages (
        id uuid NOT NULL,
        document_id uuid NOT NULL,
        chunk_index integer NOT NULL,
        chunk_count integer NOT NULL,
        title text NOT NULL,
        section text NOT NULL,
        content text NOT NULL,
        content_hash text NOT NULL,
        embedding vector NOT NULL,
        start_offset integer,
        end_offset integer,
        page integer
    ) ON COMMIT DROP;
END
$$;
