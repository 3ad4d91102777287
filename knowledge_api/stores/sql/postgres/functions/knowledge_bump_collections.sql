CREATE OR REPLACE FUNCTION knowledge_bump_collections() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('knowledge.collections_counted', 'on', true);
    INSERT INTO knowledge_collection_state AS s (collection, generation)
    SELECT DISTINCT collection, 1 FROM changed_documents
    ON CONFLICT (collection) DO UPDATE SET generation = s.generation + 1;
    RETURN NULL;
END;
$$;
