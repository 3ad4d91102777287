CREATE OR REPLACE FUNCTION knowledge_audit_page(
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
