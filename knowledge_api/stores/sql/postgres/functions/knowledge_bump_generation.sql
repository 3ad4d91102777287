CREATE OR REPLACE FUNCTION knowledge_bump_generation() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE knowledge_store_state SET generation = generation + 1;
    RETURN NULL;
END;
$$;
