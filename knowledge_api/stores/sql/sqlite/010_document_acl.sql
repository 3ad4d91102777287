-- Who may read each document (knowledge_api.principals): its access list as JSON with
-- the document, and one row per principal, indexed by principal, so a search narrowed to
-- a caller's principals finds the documents it may read through an index, as a metadata
-- filter finds its documents in document_values. An empty list is a closed document.
ALTER TABLE documents ADD COLUMN acl TEXT NOT NULL DEFAULT '["public"]';
CREATE TABLE document_acl (
    principal TEXT NOT NULL,
    document_id TEXT NOT NULL,
    PRIMARY KEY (principal, document_id)
) WITHOUT ROWID;
CREATE INDEX document_acl_document ON document_acl (document_id);
CREATE TRIGGER documents_acl_ad AFTER DELETE ON documents BEGIN
    DELETE FROM document_acl WHERE document_id = old.id;
END;

-- The documents written before read as they always did: by everyone.
INSERT INTO document_acl (principal, document_id) SELECT 'public', id FROM documents;
