-- Sources: each document records the source that produced it (an ingested path, a KB
-- host, an upload; '' for one indexed on its own), and each source when it last ran, so
-- that mirroring a source finds the documents it no longer produces.
ALTER TABLE documents ADD COLUMN source TEXT NOT NULL DEFAULT '';
CREATE INDEX documents_source ON documents (collection, source, id);
-- listings page through a collection in id order
CREATE INDEX documents_listing ON documents (collection, id);
CREATE TABLE sources (
    collection TEXT NOT NULL,
    name TEXT NOT NULL,
    last_run TEXT NOT NULL,
    PRIMARY KEY (collection, name)
);
