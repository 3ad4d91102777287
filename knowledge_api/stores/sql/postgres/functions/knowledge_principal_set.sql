CREATE OR REPLACE FUNCTION knowledge_principal_set(principal_id text, principal_groups text[])
RETURNS TABLE (id text)
LANGUAGE sql AS $$
    DELETE FROM knowledge_principals p
    WHERE p.id = principal_id AND cardinality(principal_groups) = 0;
    INSERT INTO knowledge_principals AS p (id, groups)
    SELECT principal_id, principal_groups WHERE cardinality(principal_groups) > 0
    ON CONFLICT (id) DO UPDATE SET groups = excluded.groups
    RETURNING p.id
$$;
