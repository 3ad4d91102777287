-- The filter language (field -> value or {operator: value}, $and/$or/$not) inside the
-- search functions, so a filter is applied in the query, before its LIMIT, by Postgres
-- and through PostgREST alike. The caller sends the filter tree as JSON (`filter_where`,
-- normalised: $ne and $nin arrive as $not of $eq/$in, tests no value can pass as
-- constants); `knowledge_filter_sql` writes it as a WHERE expression whose every value
-- is quoted as a literal, and the search runs it. Without a tree the searches are the
-- static queries they were.

-- Whether a text is an ISO 8601 date the filter language reads as an instant (a valid
-- day, hour, minute, second and offset), without raising on any text.
\ir functions/knowledge_is_instant.sql

-- Milliseconds since the epoch of an ISO 8601 date held as text (a bare date: midnight
-- UTC; no offset: UTC); NULL when the text is not such a date. Plain SQL the planner
-- inlines into the scan (stable, as the text-to-timestamptz cast it holds: a function
-- declared immutable around it is called row by row instead).
\ir functions/knowledge_instant_ms.sql

\ir functions/knowledge_ms.sql

-- A filter tree as a boolean expression over siam_vectors `v`; every test is true or
-- false, never NULL, so NOT is the complement (a passage without the field passes it).
\ir functions/knowledge_filter_sql.sql

DROP FUNCTION match_siam_vectors_gemini(vector, double precision, integer, text[], text, text,
    text, jsonb, text, integer);
\ir functions/match_siam_vectors_gemini.sql

DROP FUNCTION search_siam_vectors_text(text, integer, text[], text, text, text, jsonb, text);
\ir functions/search_siam_vectors_text.sql

NOTIFY pgrst, 'reload schema';
