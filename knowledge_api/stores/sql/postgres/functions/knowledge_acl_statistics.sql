CREATE OR REPLACE FUNCTION knowledge_acl_statistics()
RETURNS TABLE (
    passages double precision,
    principals text[],
    principal_shares real[],
    other_principal real,
    collections text[],
    collection_shares real[],
    other_collection double precision
)
LANGUAGE sql STABLE AS $$
    -- pg_stats lists a text[] column's most common elements with their shares, then the
    -- least of them, the greatest and the share of null elements; a principal not
    -- listed is taken as common as the least (0.005, the planner's own guess, when the
    -- column has no common element). A collection not among the common values shares
    -- what they leave evenly with the other distinct ones (n_distinct < 0: a share of
    -- the rows).
    SELECT c.reltuples::double precision,
           coalesce(a.most_common_elems::text::text[], '{}'),
           coalesce(a.most_common_elem_freqs[1:cardinality(a.most_common_elems)], '{}'),
           coalesce(a.most_common_elem_freqs[cardinality(a.most_common_elems) + 1], 0.005),
           coalesce(k.most_common_vals::text::text[], '{}'),
           coalesce(k.most_common_freqs, '{}'),
           greatest(1 - k.null_frac
                    - coalesce((SELECT sum(f) FROM unnest(k.most_common_freqs) f), 0), 0)
               / greatest(CASE WHEN k.n_distinct < 0 THEN -k.n_distinct * c.reltuples
                               ELSE k.n_distinct END
                          - coalesce(cardinality(k.most_common_vals), 0), 1)
    FROM pg_class c, pg_stats a, pg_stats k
    WHERE c.oid = 'siam_vectors'::regclass AND c.reltuples >= 0
      AND a.schemaname = (SELECT n.nspname FROM pg_namespace n WHERE n.oid = c.relnamespace)
      AND a.tablename = 'siam_vectors' AND a.attname = 'acl'
      AND k.schemaname = a.schemaname AND k.tablename = 'siam_vectors'
      AND k.attname = 'collection'
$$;
