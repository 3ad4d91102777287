-- Passage vectors are kept out of line (TOAST) and the rows that keyword search and
-- every scan read hold the rest: at 384 dimensions a vector is 1.5 kB, so a row with
-- its vector filled most of a third of a page. A row longer than 1 kB now moves its
-- vector to the table's TOAST relation, uncompressed (floats do not compress). On
-- 200,000 passages the table's own pages shrink from 403 to 130 MB, and a bulk load
-- of them ran at 921 to 1,054 passages/s against 761 before (postgres-and-supabase.md).
-- Rows written before keep their layout until rewritten (VACUUM FULL siam_vectors).
ALTER TABLE siam_vectors ALTER COLUMN embedding SET STORAGE EXTERNAL;
ALTER TABLE siam_vectors SET (toast_tuple_target = 1024);
