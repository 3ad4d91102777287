-- Each metadata value of a document as a row of its own, indexed by key and value, so a
-- filter on metadata finds its documents through an index instead of reading the
-- metadata of every document (at 200,000 passages that read took seconds). The store
-- writes a document's rows with the document (kinds and dates as the filter language
-- reads them); a deleted document's rows go with it.
CREATE TABLE document_values (
    document_id TEXT NOT NULL,
    key TEXT NOT NULL,
    kind TEXT NOT NULL,  -- text, number, true or false
    value,               -- no affinity: an integer stays an integer, a text a text
    ms INTEGER           -- a text that is an ISO 8601 date, as epoch milliseconds
);
CREATE INDEX document_values_value ON document_values (key, kind, value);
CREATE INDEX document_values_ms ON document_values (key, ms) WHERE ms IS NOT NULL;
CREATE INDEX document_values_document ON document_values (document_id);
CREATE TRIGGER documents_values_ad AFTER DELETE ON documents BEGIN
    DELETE FROM document_values WHERE document_id = old.id;
END;

-- The documents written before: the same rows, dates read by SQLite's own parser.
INSERT INTO document_values (document_id, key, kind, value, ms)
SELECT d.id, j.key,
       CASE j.type WHEN 'integer' THEN 'number' WHEN 'real' THEN 'number' ELSE j.type END,
       CASE WHEN j.type IN ('true', 'false') THEN NULL ELSE j.value END,
       CASE WHEN j.type = 'text'
                 AND j.value GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]*'
                 AND date(julianday(substr(j.value, 1, 10))) = substr(j.value, 1, 10)
                 AND substr(j.value, 12, 2) < '24'
            THEN CAST(round((julianday(j.value) - 2440587.5) * 86400000) AS INTEGER) END
FROM documents d, json_each(d.metadata) j
WHERE j.type IN ('text', 'integer', 'real', 'true', 'false');
