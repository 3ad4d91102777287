CREATE OR REPLACE FUNCTION knowledge_record_values() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        TRUNCATE siam_vector_values;
    END IF;
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        DELETE FROM siam_vector_values x USING old_passages o WHERE x.id = o.id;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO siam_vector_values (id, key, number, ms)
        SELECT p.id, t.key, t.number, t.ms
        FROM new_passages p CROSS JOIN LATERAL knowledge_typed_values(p.metadata) t;
    END IF;
    RETURN NULL;
END;
$$;
