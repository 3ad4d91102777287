-- A document's id names the source that produced it (models.document_id): two sources
-- holding the same relative path (two repositories' README.md) keep a document each.
-- The documents of a source take their new ids and their chunks the ids that follow
-- (knowledge_document_id and knowledge_chunk_id are the store's own functions, given to
-- the connection that migrates); no vector is computed again. The table is made again
-- without the rule of one document per source id (SQLite drops no constraint), with
-- its indexes and triggers; documents of no source keep their ids.
CREATE TEMP TABLE rekeyed AS
    SELECT id AS old, knowledge_document_id(collection, source_type, source_id, source) AS new
    FROM documents WHERE source <> '';
CREATE UNIQUE INDEX temp.rekeyed_old ON rekeyed (old);

UPDATE chunks SET document_id = (SELECT new FROM rekeyed WHERE old = chunks.document_id)
    WHERE document_id IN (SELECT old FROM rekeyed);
UPDATE chunks SET id = knowledge_chunk_id(document_id, chunk_index)
    WHERE document_id IN (SELECT new FROM rekeyed);
UPDATE document_values SET document_id = (SELECT new FROM rekeyed WHERE old = document_id)
    WHERE document_id IN (SELECT old FROM rekeyed);

CREATE TABLE documents_rekeyed (
    id TEXT PRIMARY KEY,
    collection TEXT NOT NULL,
    source_type TEXT NOT NULL,
    source_id TEXT NOT NULL,
    title TEXT NOT NULL DEFAULT '',
    content TEXT NOT NULL,
    metadata TEXT NOT NULL DEFAULT '{}',
    content_hash TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    source TEXT NOT NULL DEFAULT ''
);
INSERT INTO documents_rekeyed (id, collection, source_type, source_id, title, content,
        metadata, content_hash, created_at, updated_at, source)
    SELECT coalesce((SELECT new FROM rekeyed WHERE old = d.id), d.id), collection,
           source_type, source_id, title, content, metadata, content_hash, created_at,
           updated_at, source
    FROM documents d;
DROP TABLE documents;
ALTER TABLE documents_rekeyed RENAME TO documents;
DROP TABLE temp.rekeyed;

CREATE INDEX documents_source ON documents (collection, source, id);
CREATE INDEX documents_listing ON documents (collection, id);
-- a document is found by its source id (one per source)
CREATE INDEX documents_source_id ON documents (collection, source_type, source_id);

CREATE TRIGGER documents_generation_ai AFTER INSERT ON documents BEGIN
    UPDATE store_state SET generation = generation + 1;
END;
CREATE TRIGGER documents_generation_au AFTER UPDATE ON documents BEGIN
    UPDATE store_state SET generation = generation + 1;
END;
CREATE TRIGGER documents_generation_ad AFTER DELETE ON documents BEGIN
    UPDATE store_state SET generation = generation + 1;
END;
CREATE TRIGGER documents_collection_ai AFTER INSERT ON documents BEGIN
    INSERT INTO collection_state (collection, generation) VALUES (new.collection, 1)
        ON CONFLICT (collection) DO UPDATE SET generation = generation + 1;
END;
CREATE TRIGGER documents_collection_au AFTER UPDATE ON documents BEGIN
    INSERT INTO collection_state (collection, generation) VALUES (new.collection, 1)
        ON CONFLICT (collection) DO UPDATE SET generation = generation + 1;
    INSERT INTO collection_state (collection, generation)
        SELECT old.collection, 1 WHERE old.collection <> new.collection
        ON CONFLICT (collection) DO UPDATE SET generation = generation + 1;
END;
CREATE TRIGGER documents_collection_ad AFTER DELETE ON documents BEGIN
    INSERT INTO collection_state (collection, generation) VALUES (old.collection, 1)
        ON CONFLICT (collection) DO UPDATE SET generation = generation + 1;
END;
CREATE TRIGGER documents_values_ad AFTER DELETE ON documents BEGIN
    DELETE FROM document_values WHERE document_id = old.id;
END;

-- where a source reads its files (a folder or a base URL): another source reading one
-- of them is refused
ALTER TABLE sources ADD COLUMN root TEXT NOT NULL DEFAULT '';

-- answers cached under the old ids are answers of another store
UPDATE store_state SET generation = generation + 1;
UPDATE collection_state SET generation = generation + 1;
