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

CREATE FUNCTION knowledge_audit_append(
    entry_actor text, entry_action text, entry_collection text, entry_changes jsonb,
    entry_request_id text
)
RETURNS TABLE (id bigint)
LANGUAGE sql AS $$
    INSERT INTO knowledge_audit (actor, action, collection, changes, request_id)
    VALUES (entry_actor, entry_action, entry_collection, entry_changes, entry_request_id)
    RETURNING id
$$;

-- A page, newest first: rows older than `before_id` (NULL: from the newest) matching
-- the filters that are not NULL (times as ISO 8601 text, which PostgREST and asyncpg
-- both pass as they are).
CREATE FUNCTION knowledge_audit_page(
    page_size integer, before_id bigint, by_actor text, in_collection text,
    since text, until text
)
RETURNS TABLE (
    id bigint, at timestamptz, actor text, action text, collection text, changes jsonb,
    request_id text
)
LANGUAGE sql STABLE AS $$
    SELECT a.id, a.at, a.actor, a.action, a.collection, a.changes, a.request_id
    FROM knowledge_audit a
    WHERE (before_id IS NULL OR a.id < before_id)
      AND (by_actor IS NULL OR a.actor = by_actor)
      AND (in_collection IS NULL OR a.collection = in_collection)
      AND (since IS NULL OR a.at >= since::timestamptz)
      AND (until IS NULL OR a.at < until::timestamptz)
    ORDER BY a.id DESC
    LIMIT page_size
$$;

CREATE FUNCTION knowledge_audit_prune(older_than text)
RETURNS TABLE (pruned bigint)
LANGUAGE sql AS $$
    WITH gone AS (DELETE FROM knowledge_audit WHERE at < older_than::timestamptz RETURNING 1)
    SELECT count(*) FROM gone
$$;

NOTIFY pgrst, 'reload schema';
