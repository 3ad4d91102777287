CREATE OR REPLACE FUNCTION knowledge_bump_every_collection() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF pg_trigger_depth() = 1
        AND current_setting('knowledge.collections_counted', true) IS DISTINCT FROM 'on' THEN
        UPDATE knowledge_collection_state SET generation = generation + 1;
    END IF;
    RETURN NULL;
END;
$$;
