CREATE OR REPLACE FUNCTION knowledge_source_acl_set(
    acl_collection text, acl_source text, source_acl text[]
)
RETURNS TABLE (source text)
LANGUAGE sql AS $$
    INSERT INTO knowledge_source_acls AS s (collection, source, acl)
    VALUES (acl_collection, acl_source, source_acl)
    ON CONFLICT (collection, source) DO UPDATE SET acl = excluded.acl
    RETURNING s.source
$$;
