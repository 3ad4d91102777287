-- Each number and each ISO 8601 date among a passage's metadata values as a row of its
-- own, typed and indexed by key and value, so a range filter finds its passages through
-- an index instead of reading (and, for a date, parsing) the metadata of every passage:
-- at 20,000 passages a date range read them all and added 180 ms to a search. Triggers
-- keep the rows with their passages, whoever writes (the store, a bulk load, plain SQL).
CREATE TABLE siam_vector_values (
    id uuid NOT NULL,      -- the passage (siam_vectors.id)
    key text NOT NULL,
    number numeric,        -- a JSON number
    ms bigint              -- a text that is an ISO 8601 date, as epoch milliseconds
);
ALTER TABLE siam_vector_values ENABLE ROW LEVEL SECURITY;

-- A passage's metadata values that are numbers or dates, typed.
\ir functions/knowledge_typed_values.sql

\ir functions/knowledge_record_values.sql
CREATE TRIGGER siam_vectors_inserted_values
    AFTER INSERT ON siam_vectors REFERENCING NEW TABLE AS new_passages
    FOR EACH STATEMENT EXECUTE FUNCTION knowledge_record_values();
CREATE TRIGGER siam_vectors_updated_values
    AFTER UPDATE ON siam_vectors REFERENCING OLD TABLE AS old_passages NEW TABLE AS new_passages
    FOR EACH STATEMENT EXECUTE FUNCTION knowledge_record_values();
CREATE TRIGGER siam_vectors_deleted_values
    AFTER DELETE ON siam_vectors REFERENCING OLD TABLE AS old_passages
    FOR EACH STATEMENT EXECUTE FUNCTION knowledge_record_values();
CREATE TRIGGER siam_vectors_truncated_values
    AFTER TRUNCATE ON siam_vectors FOR EACH STATEMENT EXECUTE FUNCTION knowledge_record_values();

-- The passages written before.
INSERT INTO siam_vector_values (id, key, number, ms)
SELECT p.id, t.key, t.number, t.ms
FROM siam_vectors p CROSS JOIN LATERAL knowledge_typed_values(p.metadata) t;
CREATE INDEX siam_vector_values_number ON siam_vector_values (key, number, id)
    WHERE number IS NOT NULL;
CREATE INDEX siam_vector_values_ms ON siam_vector_values (key, ms, id) WHERE ms IS NOT NULL;
CREATE INDEX siam_vector_values_passage ON siam_vector_values (id);
-- How many rows a key's range holds, estimated for the key and its values together (the
-- planner's choice between an exact and a graph search below rests on it): apart, a
-- range of one key among two was estimated at 900 rows for 2,000.
CREATE STATISTICS siam_vector_values_key_number (mcv) ON key, number FROM siam_vector_values;
CREATE STATISTICS siam_vector_values_key_ms (mcv) ON key, ms FROM siam_vector_values;
ANALYZE siam_vector_values;

-- A range on a metadata field is a lookup in siam_vector_values, all the bounds an
-- `$and` sets on one field in one lookup.
\ir functions/knowledge_filter_sql.sql

-- How many passages of each collection hold each value of each field, kept by triggers
-- too, so the facets of a search with no filter (every passage of its collection) are
-- read, not counted: at 20,000 passages counting them took 30 ms, at 200,000 ten times
-- that. A field is the passage's source_type or source_id, or a metadata key whose value
-- is a string, a number or a boolean (the value as its JSON text).
CREATE TABLE siam_vector_facets (
    collection text NOT NULL,
    field text NOT NULL,
    kind text NOT NULL,
    value text NOT NULL,
    passages bigint NOT NULL,
    PRIMARY KEY (collection, field, kind, value)
);
CREATE INDEX siam_vector_facets_emptied ON siam_vector_facets (collection) WHERE passages = 0;
ALTER TABLE siam_vector_facets ENABLE ROW LEVEL SECURITY;

-- A passage's fields and their values, as facets count them.
\ir functions/knowledge_facet_values.sql

\ir functions/knowledge_count_facets.sql
CREATE TRIGGER siam_vectors_inserted_facets
    AFTER INSERT ON siam_vectors REFERENCING NEW TABLE AS new_passages
    FOR EACH STATEMENT EXECUTE FUNCTION knowledge_count_facets();
CREATE TRIGGER siam_vectors_updated_facets
    AFTER UPDATE ON siam_vectors REFERENCING OLD TABLE AS old_passages NEW TABLE AS new_passages
    FOR EACH STATEMENT EXECUTE FUNCTION knowledge_count_facets();
CREATE TRIGGER siam_vectors_deleted_facets
    AFTER DELETE ON siam_vectors REFERENCING OLD TABLE AS old_passages
    FOR EACH STATEMENT EXECUTE FUNCTION knowledge_count_facets();
CREATE TRIGGER siam_vectors_truncated_facets
    AFTER TRUNCATE ON siam_vectors FOR EACH STATEMENT EXECUTE FUNCTION knowledge_count_facets();

INSERT INTO siam_vector_facets (collection, field, kind, value, passages)
SELECT v.collection, t.field, t.kind, t.value, count(*)
FROM siam_vectors v
CROSS JOIN LATERAL knowledge_facet_values(v.source_type, v.source_id, v.metadata) t
GROUP BY 1, 2, 3, 4;
ANALYZE siam_vector_facets;

-- The WHERE expression of the search functions' filter arguments ($1 to $6 and the
-- filter tree), over siam_vectors `v`.
\ir functions/knowledge_passes_sql.sql

-- A vector search whose filters the planner expects to let few passages through
-- measures their distances exactly instead of walking the HNSW graph for them; the
-- planner's estimate comes from an EXPLAIN of the filters alone.
\ir functions/knowledge_planned_rows.sql
\ir functions/match_siam_vectors_gemini.sql

-- Facets with no filter read the counts; with one, count the passages it lets through.
\ir functions/knowledge_facets.sql

NOTIFY pgrst, 'reload schema';
