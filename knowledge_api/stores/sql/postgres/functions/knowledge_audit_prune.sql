CREATE OR REPLACE FUNCTION knowledge_audit_prune(older_than text)
RETURNS TABLE (pruned bigint)
LANGUAGE sql AS $$
    WITH gone AS (DELETE FROM knowledge_audit WHERE at < older_than::timestamptz RETURNING 1)
    SELECT count(*) FROM gone
$$;
