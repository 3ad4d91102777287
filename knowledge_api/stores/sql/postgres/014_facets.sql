-- Facets: how many passages of a search's match set hold each value of a field, counted
-- in one query over the passages the search's filters let through (the same arguments
-- as the search functions), each field cut to its `facet_limit` most frequent values,
-- with the number of distinct values it holds in all. A field is a metadata key, or
-- the passage's own source_type or source_id; values that are lists or objects are not
-- counted. Numbers come back as their JSON text (12 and 12.0 are two groups here: the
-- caller counts them as one value).
\ir functions/knowledge_facets.sql

NOTIFY pgrst, 'reload schema';
