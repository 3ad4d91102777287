-- One rating per key per query: a key's later rating of a query replaces its earlier
-- one (which keeps its id), so one key can neither flood a query with ratings nor
-- outvote the others on it. Of the ratings kept before, each key's newest stays.
DELETE FROM knowledge_ratings r
USING knowledge_ratings newer
WHERE newer.query_id = r.query_id AND newer.key = r.key AND newer.id > r.id;

CREATE UNIQUE INDEX knowledge_ratings_once ON knowledge_ratings (query_id, key);

\ir functions/knowledge_rating_add.sql

NOTIFY pgrst, 'reload schema';
