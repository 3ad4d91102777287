CREATE OR REPLACE FUNCTION knowledge_exact_rows(wanted integer)
RETURNS double precision
LANGUAGE sql STABLE AS $$
    SELECT sqrt(6.0 * wanted * greatest((SELECT c.reltuples FROM pg_class c
                                         WHERE c.oid = 'siam_vectors'::regclass), 0))
$$;
