-- Record the embedder only when none is recorded: a database turned read-only (a
-- replica, a read-only role) still opens, since nothing is written on the way.
\ir functions/knowledge_check_embedder.sql

NOTIFY pgrst, 'reload schema';
