-- Who may read each document (knowledge_api.principals): its access list, on the
-- document and on each of its passages, where both legs of a search test it (`&&` with
-- the caller's principals, under a GIN index). The documents written before read as
-- they always did: by everyone. An empty list is a closed document.
ALTER TABLE knowledge_documents ADD COLUMN IF NOT EXISTS acl text[] NOT NULL DEFAULT '{public}';
ALTER TABLE siam_vectors ADD COLUMN IF NOT EXISTS acl text[] NOT NULL DEFAULT '{public}';
CREATE INDEX IF NOT EXISTS siam_vectors_acl ON siam_vectors USING gin (acl);

-- A filter's `acl` test, as `$acl` of the principals.
\ir functions/knowledge_filter_sql.sql

-- Documents are written with their access list.
-- Replaced in 023_chunk_offsets: the current text is functions/knowledge_stage_documents.sql.
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
        embedding vector NOT NULL
    ) ON COMMIT DROP;
END
$$;

-- Replaced in 023_chunk_offsets: the current text is functions/knowledge_stage_json.sql.
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
           c.content_hash, c.embedding
    FROM jsonb_to_recordset(staged) AS d(id uuid, chunks jsonb),
        jsonb_to_recordset(d.chunks) AS c(id uuid, chunk_index integer, chunk_count integer,
        title text, section text, content text, content_hash text, embedding vector);
END
$$;

-- Replaced in 023_chunk_offsets: the current text is functions/knowledge_index_staged.sql.
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
        content, content_hash, embedding, metadata, acl)
    SELECT c.id, d.id, d.collection, knowledge_text_field(d.metadata, 'organization'),
           knowledge_text_field(d.metadata, 'division'),
           knowledge_text_field(d.metadata, 'app_under_test'), d.source_type, d.source_id,
           c.title, c.section, c.chunk_index, c.chunk_count, c.content, c.content_hash,
           c.embedding, d.metadata, d.acl
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

-- The listing shows it.
DROP FUNCTION IF EXISTS knowledge_list_documents(text, uuid, text, text, integer);
-- Replaced in 025_reader_scoped_reads: the current text is functions/knowledge_list_documents.sql.
CREATE OR REPLACE FUNCTION knowledge_list_documents(
    list_collection text,
    after_id uuid DEFAULT NULL,
    list_source_type text DEFAULT NULL,
    list_source text DEFAULT NULL,
    list_limit integer DEFAULT 100
) RETURNS TABLE (id uuid, collection text, source_type text, source_id text, source text,
    title text, metadata jsonb, updated_at timestamptz, chunks bigint, created_at timestamptz,
    acl text[])
LANGUAGE sql STABLE AS $$
    SELECT d.id, d.collection, d.source_type, d.source_id, d.source, d.title, d.metadata,
           d.updated_at,
           (SELECT count(*) FROM siam_vectors v WHERE v.document_id = d.id), d.created_at,
           d.acl
    FROM knowledge_documents d
    WHERE d.collection = list_collection
      -- a range of the listing index whatever the plan: an `IS NULL OR` here would make
      -- a generic plan scan the collection from its first id for every page
      AND d.id > coalesce(after_id, '00000000-0000-0000-0000-000000000000')
      AND (list_source_type IS NULL OR d.source_type = list_source_type)
      AND (list_source IS NULL OR d.source = list_source)
    ORDER BY d.id
    LIMIT list_limit
$$;

-- Changing it embeds nothing again.
\ir functions/knowledge_set_acl.sql

-- A key reads as a user (its own id, '' for none) with groups of its own.
ALTER TABLE knowledge_api_keys ADD COLUMN IF NOT EXISTS user_id text NOT NULL DEFAULT '';
ALTER TABLE knowledge_api_keys ADD COLUMN IF NOT EXISTS groups text[] NOT NULL DEFAULT '{}';
DROP FUNCTION IF EXISTS knowledge_api_key_create(text, text, text[], text[]);
\ir functions/knowledge_api_key_create.sql

-- The groups the service knows for each user id; every replica reads them here.
CREATE TABLE IF NOT EXISTS knowledge_principals (
    id text PRIMARY KEY,
    groups text[] NOT NULL
);
ALTER TABLE knowledge_principals ENABLE ROW LEVEL SECURITY;
\ir functions/knowledge_principal_set.sql

-- The access list each source gives the documents it writes (a connector source added
-- without one is closed).
CREATE TABLE IF NOT EXISTS knowledge_source_acls (
    collection text NOT NULL,
    source text NOT NULL,
    acl text[] NOT NULL,
    PRIMARY KEY (collection, source)
);
ALTER TABLE knowledge_source_acls ENABLE ROW LEVEL SECURITY;
\ir functions/knowledge_source_acl_set.sql

NOTIFY pgrst, 'reload schema';
