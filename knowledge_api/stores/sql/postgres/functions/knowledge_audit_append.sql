CREATE OR REPLACE FUNCTION knowledge_audit_append(
    entry_actor text, entry_action text, entry_collection text, entry_changes jsonb,
    entry_request_id text
)
RETURNS TABLE (id bigint)
LANGUAGE sql AS $$
    INSERT INTO knowledge_audit (actor, action, collection, changes, request_id)
    VALUES (entry_actor, entry_action, entry_collection, entry_changes, entry_request_id)
    RETURNING id
$$;
