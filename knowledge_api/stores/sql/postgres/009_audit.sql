-- The audit trail: one row per write through any door (HTTP, MCP, the command line,
-- KB sync), kept KNOWLEDGE_AUDIT_DAYS. Every replica appends and reads here.
CREATE TABLE knowledge_audit (
    id bigserial PRIMARY KEY,
    at timestamptz NOT NULL DEFAULT now(),
    actor text NOT NULL,
    action text NOT NULL,
    collection text,
    changes jsonb NOT NULL DEFAULT '{}',
    request_id text
);
CREATE INDEX knowledge_audit_at ON knowledge_audit (at);

\ir functions/knowledge_audit_append.sql

-- A page, newest first: rows older than `before_id` (NULL: from the newest) matching
-- the filters that are not NULL (times as ISO 8601 text, which PostgREST and asyncpg
-- both pass as they are).
\ir functions/knowledge_audit_page.sql

\ir functions/knowledge_audit_prune.sql

NOTIFY pgrst, 'reload schema';
