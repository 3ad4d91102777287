-- Keep the keyword index in few segments. FTS5 looks each query term up in every
-- segment (about 2 µs a term a segment at 5,000 chunks), and by default merges small
-- ones only once 64 pages were written since the last merge or 16 wait on one level:
-- a store written in small transactions kept 20 segments, 60 % of a query's lookups.
-- From 4 segments on a level they are merged at once (write cost grows by a little, a
-- level of 4 is merged in the write that makes it); the index written so far is merged
-- into one segment now, once (about 0.1 s at 5,000 chunks).
INSERT INTO chunks_fts (chunks_fts, rank) VALUES ('crisismerge', 4);
INSERT INTO chunks_fts (chunks_fts) VALUES ('optimize');
