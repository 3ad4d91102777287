-- Several collections searched as one: the search, facet and planning functions take
-- the collections as an array (filter_collections; NULL: filter_collection alone), so
-- both candidate lists are cut to their best over the union inside one query, and the
-- search functions return each passage's collection. A new argument and a new RETURNS
-- TABLE need the functions dropped and created again; the earlier migrations gave them
-- no grants or comments to restore.
DROP FUNCTION IF EXISTS match_siam_vectors_gemini(vector, double precision, integer, text[],
    text, text, text, jsonb, text, integer, jsonb);
DROP FUNCTION IF EXISTS search_siam_vectors_text(text, integer, text[], text, text, text,
    jsonb, text, jsonb);
DROP FUNCTION IF EXISTS knowledge_planned_rows(text[], text, text, text, jsonb, text, jsonb);
DROP FUNCTION IF EXISTS knowledge_facets(text[], integer, text[], text, text, text, jsonb,
    text, jsonb);

-- The WHERE expression of the search functions' filter arguments: $1 is the array of
-- collections searched.
\ir functions/knowledge_passes_sql.sql
\ir functions/knowledge_planned_rows.sql
\ir functions/match_siam_vectors_gemini.sql
\ir functions/search_siam_vectors_text.sql
\ir functions/knowledge_facets.sql

NOTIFY pgrst, 'reload schema';
