-- A counter per collection that every committed write of one of its documents moves,
-- in the writing transaction: a write empties only its own collection's cached answers,
-- on every replica (knowledge_store_state stays the counter of the whole store). Every
-- write of passages writes their document too, so the documents' changes are counted.
CREATE TABLE knowledge_collection_state (
    collection text PRIMARY KEY,
    generation bigint NOT NULL DEFAULT 0
);
ALTER TABLE knowledge_collection_state ENABLE ROW LEVEL SECURITY;

CREATE FUNCTION knowledge_bump_collections() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO knowledge_collection_state AS s (collection, generation)
    SELECT DISTINCT collection, 1 FROM changed_documents
    ON CONFLICT (collection) DO UPDATE SET generation = s.generation + 1;
    RETURN NULL;
END;
$$;
CREATE TRIGGER knowledge_documents_inserted_collections
    AFTER INSERT ON knowledge_documents REFERENCING NEW TABLE AS changed_documents
    FOR EACH STATEMENT EXECUTE FUNCTION knowledge_bump_collections();
CREATE TRIGGER knowledge_documents_updated_collections
    AFTER UPDATE ON knowledge_documents REFERENCING NEW TABLE AS changed_documents
    FOR EACH STATEMENT EXECUTE FUNCTION knowledge_bump_collections();
CREATE TRIGGER knowledge_documents_deleted_collections
    AFTER DELETE ON knowledge_documents REFERENCING OLD TABLE AS changed_documents
    FOR EACH STATEMENT EXECUTE FUNCTION knowledge_bump_collections();
