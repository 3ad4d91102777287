"""The sqlite store: one SQLite file with FTS5 keywords and vectors searched in memory."""
