-- Where each chunk sits in its document's text (code points, end exclusive) and, for a
-- PDF, its page; NULL for chunks stored before (`knowledge-api backfill-offsets`).
ALTER TABLE chunks ADD COLUMN start_offset INTEGER;
ALTER TABLE chunks ADD COLUMN end_offset INTEGER;
ALTER TABLE chunks ADD COLUMN page INTEGER;
