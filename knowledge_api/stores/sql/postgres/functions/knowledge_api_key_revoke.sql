CREATE OR REPLACE FUNCTION knowledge_api_key_revoke(key_name text)
RETURNS TABLE (revoked boolean)
LANGUAGE sql AS $$
    DELETE FROM knowledge_api_keys WHERE name = key_name RETURNING true
$$;
