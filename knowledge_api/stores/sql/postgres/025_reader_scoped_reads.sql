-- What a reader who may read part of the documents asks, answered about as cheaply as
-- what anyone asks.
--
-- The search functions take the reader's principals apart from the filter tree
-- (`filter_acl`). With no other filter, principals that let many passages through are
-- tested on each row a search meets, never through the access list's GIN index (whose
-- bitmap for half of 200,000 passages took over 100 ms to build, beside a keyword
-- search of 15), and the keyword search ranks as many of the reader's passages as a
-- search for everyone holds rather than 2,000 of them (which read twice the rows for a
-- reader of half); few are found through the index, and searched exactly by vector, as
-- before. With other filters they join the tree (knowledge_with_acl) and are planned
-- with them, as before.
DROP FUNCTION IF EXISTS match_siam_vectors_gemini(vector, double precision, integer, text[],
    text, text, text, jsonb, text, integer, jsonb, text[]);
DROP FUNCTION IF EXISTS search_siam_vectors_text(text, integer, text[], text, text, text,
    jsonb, text, jsonb, text[]);
-- A search's filter tree with the test of its readers' principals in it: the form the
-- filtered paths compile.
\ir functions/knowledge_with_acl.sql
-- The most passages a filter may let through for a search of `wanted` results to read
-- them all rather than an index of the whole table. The vector search measures them
-- exactly: an HNSW scan walks the graph past about N/allowed passages for each one that
-- passes (and may stop short), an exact one reads each allowed passage's vector once;
-- the costs meet near allowed = sqrt(6 k N) (k results of N passages: 3,500 at 200,000
-- for 10). The keyword search finds a reader's few passages through the access list's
-- index, and tests more on each row it meets.
\ir functions/knowledge_exact_rows.sql
\ir functions/match_siam_vectors_gemini.sql
\ir functions/search_siam_vectors_text.sql

-- Counting the documents a reader may read, and listing a page of them, in one query
-- each (the listing and the counts of collections and sources used to page through
-- every document): the documents' access lists under a GIN index too.
CREATE INDEX IF NOT EXISTS knowledge_documents_acl ON knowledge_documents USING gin (acl);
DROP FUNCTION IF EXISTS knowledge_list_documents(text, uuid, text, text, integer);
\ir functions/knowledge_list_documents.sql
-- By collection and source, the documents some principals may read and their passages.
\ir functions/knowledge_readable_counts.sql

NOTIFY pgrst, 'reload schema';
