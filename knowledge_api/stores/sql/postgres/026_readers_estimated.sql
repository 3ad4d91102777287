-- How many passages a reader's principals allow, without asking the planner each search.
--
-- A search narrowed by principals alone chose between the HNSW graph and the exact
-- search (and the keyword search how many of the reader's passages to rank) from an
-- EXPLAIN of the principals' test, in each search function a search calls: a plan
-- made per search, as long as the rest of a fast search's own work. The planner
-- estimates it from the access lists' statistics: the store now reads those once a
-- minute (knowledge_acl_statistics: each common principal's share of the passages,
-- each common collection's) and passes the search functions its estimate
-- (`filter_acl_rows`); without one they ask the planner, as before.
DROP FUNCTION IF EXISTS match_siam_vectors_gemini(vector, double precision, integer, text[],
    text, text, text, jsonb, text, integer, jsonb, text[], text[]);
DROP FUNCTION IF EXISTS search_siam_vectors_text(text, integer, text[], text, text, text,
    jsonb, text, jsonb, text[], text[]);
\ir functions/knowledge_acl_statistics.sql
\ir functions/match_siam_vectors_gemini.sql
\ir functions/search_siam_vectors_text.sql

NOTIFY pgrst, 'reload schema';
