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
\ir functions/knowledge_stage_documents.sql

\ir functions/knowledge_stage_json.sql

\ir functions/knowledge_index_staged.sql

-- The listing shows it.
DROP FUNCTION IF EXISTS knowledge_list_documents(text, uuid, text, text, integer);
\ir functions/knowledge_list_documents.sql

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
