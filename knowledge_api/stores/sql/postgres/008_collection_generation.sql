-- A counter per collection that every committed write of one of its documents moves,
-- in the writing transaction: a write empties only its own collection's cached answers,
-- on every replica (knowledge_store_state stays the counter of the whole store).
CREATE TABLE knowledge_collection_state (
    collection text PRIMARY KEY,
    generation bigint NOT NULL DEFAULT 0
);
ALTER TABLE knowledge_collection_state ENABLE ROW LEVEL SECURITY;
INSERT INTO knowledge_collection_state (collection)
SELECT DISTINCT collection FROM knowledge_documents;

\ir functions/knowledge_bump_collections.sql
CREATE TRIGGER knowledge_documents_inserted_collections
    AFTER INSERT ON knowledge_documents REFERENCING NEW TABLE AS changed_documents
    FOR EACH STATEMENT EXECUTE FUNCTION knowledge_bump_collections();
CREATE TRIGGER knowledge_documents_updated_collections
    AFTER UPDATE ON knowledge_documents REFERENCING NEW TABLE AS changed_documents
    FOR EACH STATEMENT EXECUTE FUNCTION knowledge_bump_collections();
CREATE TRIGGER knowledge_documents_deleted_collections
    AFTER DELETE ON knowledge_documents REFERENCING OLD TABLE AS changed_documents
    FOR EACH STATEMENT EXECUTE FUNCTION knowledge_bump_collections();

-- Passages written with their documents (the store's writes, which write the document
-- first; a document's delete cascading to them) are counted above. Passages written
-- alone (plain SQL) may be any collection's: every collection's counter moves.
\ir functions/knowledge_bump_every_collection.sql
CREATE TRIGGER siam_vectors_changed_collections
    AFTER INSERT OR UPDATE OR DELETE ON siam_vectors
    FOR EACH STATEMENT EXECUTE FUNCTION knowledge_bump_every_collection();
