-- How many passages a reader's principals allow, without asking the planner each search.
--
-- A search narrowed by principals alone chose between the HNSW graph and the exact
-- search (and the keyword search how many of the reader's passages to rank) from an
-- EXPLAIN of the principals' test in each search function it called: three for a
-- hybrid search and its feedback round, 0.3 to 0.5 ms of processor time each. The
-- planner estimates it from the access lists' statistics: the store now reads those
-- once a minute (knowledge_acl_statistics: each common principal's share of the
-- passages, each common collection's) and passes the search functions its estimate
-- (`filter_acl_rows`); without one they ask the planner, as before. A wide set's
-- graph scan keeps a quarter more candidates than its share needs, so that nearly
-- every query ends with its first round, and tests each row it meets through a hash
-- of the reader's principals (knowledge_acl_allows).
DROP FUNCTION IF EXISTS match_siam_vectors_gemini(vector, double precision, integer, text[],
    text, text, text, jsonb, text, integer, jsonb, text[], text[]);
DROP FUNCTION IF EXISTS search_siam_vectors_text(text, integer, text[], text, text, text,
    jsonb, text, jsonb, text[], text[]);
\ir functions/knowledge_acl_statistics.sql
\ir functions/knowledge_acl_allows.sql
\ir functions/match_siam_vectors_gemini.sql
\ir functions/search_siam_vectors_text.sql

-- Counting what a reader may read: the readable documents joined with their passages
-- at once, not the passages of each document looked up in turn (for a reader of half
-- of 200,000 documents, 180 to 280 ms before, 130 to 140 ms now).
\ir functions/knowledge_readable_counts.sql

NOTIFY pgrst, 'reload schema';
