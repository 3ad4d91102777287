-- A restore keeps each document's dates: a document staged with its created_at and
-- updated_at (read from another store or an export file) is stored with them, instead of
-- the time of the write. Listings show created_at beside updated_at (a new RETURNS
-- TABLE: the function is dropped and created again; it had no grants or comments).
\ir functions/knowledge_stage_documents.sql

\ir functions/knowledge_stage_json.sql

\ir functions/knowledge_index_staged.sql

DROP FUNCTION knowledge_list_documents(text, uuid, text, text, integer);
\ir functions/knowledge_list_documents.sql

NOTIFY pgrst, 'reload schema';
