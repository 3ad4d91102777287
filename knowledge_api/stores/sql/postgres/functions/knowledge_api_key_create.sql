CREATE OR REPLACE FUNCTION knowledge_api_key_create(
    key_name text, key_hash text, key_scopes text[], key_collections text[],
    key_user text DEFAULT '', key_groups text[] DEFAULT '{}'
)
RETURNS TABLE (created boolean)
LANGUAGE sql AS $$
    INSERT INTO knowledge_api_keys (name, key_hash, scopes, collections, user_id, groups)
    VALUES (key_name, key_hash, key_scopes, key_collections, key_user, key_groups)
    ON CONFLICT (name) DO NOTHING
    RETURNING true
$$;
