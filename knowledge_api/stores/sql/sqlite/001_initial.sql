-- Documents, their chunks (with float32 embedding blobs) and an FTS5 index over chunks.
CREATE TABLE documents (
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
    UNIQUE (collection, source_type, source_id)
);

CREATE TABLE chunks (
    rowid INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    document_id TEXT NOT NULL REFERENCES documents (id) ON DELETE CASCADE,
    chunk_index INTEGER NOT NULL,
    chunk_count INTEGER NOT NULL,
    collection TEXT NOT NULL,
    source_type TEXT NOT NULL,
    title TEXT NOT NULL DEFAULT '',
    section TEXT NOT NULL DEFAULT '',
    content TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    embedding BLOB NOT NULL
);
CREATE INDEX chunks_document ON chunks (document_id, chunk_index);
CREATE INDEX chunks_hash ON chunks (content_hash);

CREATE VIRTUAL TABLE chunks_fts USING fts5 (
    title, section, content,
    content = 'chunks', content_rowid = 'rowid',
    tokenize = 'porter unicode61 remove_diacritics 2'
);
CREATE TRIGGER chunks_ai AFTER INSERT ON chunks BEGIN
    INSERT INTO chunks_fts (rowid, title, section, content)
    VALUES (new.rowid, new.title, new.section, new.content);
END;
CREATE TRIGGER chunks_ad AFTER DELETE ON chunks BEGIN
    INSERT INTO chunks_fts (chunks_fts, rowid, title, section, content)
    VALUES ('delete', old.rowid, old.title, old.section, old.content);
END;

-- Which embedder wrote the vectors: another one is refused rather than mixed in.
CREATE TABLE store_meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
