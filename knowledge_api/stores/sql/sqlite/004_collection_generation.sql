-- A counter per collection that every committed change of one of its documents moves,
-- in the same transaction: a write empties only its own collection's cached answers,
-- in every process reading this file (store_state stays the counter of the whole file).
CREATE TABLE collection_state (
    collection TEXT PRIMARY KEY,
    generation INTEGER NOT NULL DEFAULT 0
);
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
