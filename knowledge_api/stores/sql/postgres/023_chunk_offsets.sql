-- Where each passage sits in its document's text (code points, end exclusive) and, for
-- a PDF, its page; NULL for passages stored before (`knowledge-api backfill-offsets`).
-- The staging table and the functions that fill and move it carry the three columns.
ALTER TABLE siam_vectors ADD COLUMN IF NOT EXISTS start_offset integer;
ALTER TABLE siam_vectors ADD COLUMN IF NOT EXISTS end_offset integer;
ALTER TABLE siam_vectors ADD COLUMN IF NOT EXISTS page integer;
\ir functions/knowledge_stage_documents.sql
\ir functions/knowledge_stage_json.sql
\ir functions/knowledge_index_staged.sql

NOTIFY pgrst, 'reload schema';
