-- Every insert and delete of a chunk, in commit order. A process that keeps vectors in
-- memory, or an index persisted beside this file, catches up on what others wrote by
-- reading the entries after the last one it applied, instead of reloading every vector.
CREATE TABLE vector_log (
    seq INTEGER PRIMARY KEY,
    chunk_rowid INTEGER NOT NULL
);
CREATE TRIGGER chunks_log_insert AFTER INSERT ON chunks BEGIN
    INSERT INTO vector_log (chunk_rowid) VALUES (new.rowid);
END;
CREATE TRIGGER chunks_log_delete AFTER DELETE ON chunks BEGIN
    INSERT INTO vector_log (chunk_rowid) VALUES (old.rowid);
END;

-- Which database a persisted index belongs to: a file replaced by another one at the
-- same path must not be searched with the old file's index.
INSERT OR IGNORE INTO store_meta (key, value) VALUES ('store_id', lower(hex(randomblob(16))));
