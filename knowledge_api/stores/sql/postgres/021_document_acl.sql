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

NOTIFY pgrst, 'reload schema';
