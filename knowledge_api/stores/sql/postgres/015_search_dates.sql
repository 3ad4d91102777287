-- The search functions return the dates of each passage's document (created_at,
-- updated_at of knowledge_documents: the dates filters compare, kept when a document is
-- written again; a passage's own row is rewritten with every write), so recency on
-- those dates ranks on Postgres and Supabase as elsewhere. A new RETURNS TABLE needs the
-- functions dropped and created again; the earlier migrations gave them no grants or
-- comments to restore.
DROP FUNCTION match_siam_vectors_gemini(vector, double precision, integer, text[], text, text,
    text, jsonb, text, integer, jsonb);
\ir functions/match_siam_vectors_gemini.sql

DROP FUNCTION search_siam_vectors_text(text, integer, text[], text, text, text, jsonb, text,
    jsonb);
\ir functions/search_siam_vectors_text.sql

NOTIFY pgrst, 'reload schema';
