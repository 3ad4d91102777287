-- A counter every committed change of a document moves, in the same transaction: the
-- one token of the content that every process reading this file agrees on, so replicas
-- sharing a cache key their entries on it.
CREATE TABLE store_state (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    generation INTEGER NOT NULL DEFAULT 0
);
INSERT INTO store_state (id) VALUES (1);
CREATE TRIGGER documents_generation_ai AFTER INSERT ON documents BEGIN
    UPDATE store_state SET generation = generation + 1;
END;
CREATE TRIGGER documents_generation_au AFTER UPDATE ON documents BEGIN
    UPDATE store_state SET generation = generation + 1;
END;
CREATE TRIGGER documents_generation_ad AFTER DELETE ON documents BEGIN
    UPDATE store_state SET generation = generation + 1;
END;
