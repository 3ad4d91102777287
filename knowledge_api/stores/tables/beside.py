"""Where a store's deployment keeps its side tables (API keys, the audit trail,
answers and their ratings, upload jobs) when its own database does not hold them:
tables of the SQLite file at `sqlite_path` (the sqlite store's own file). A store
that keeps them in its own database (the Postgres schema) says so itself."""

from __future__ import annotations

from pathlib import Path

from knowledge_api.stores.tables import SideTables
from knowledge_api.stores.tables.audit import SQLiteAudit
from knowledge_api.stores.tables.feedback import SQLiteFeedback
from knowledge_api.stores.tables.jobs import SQLiteJobs
from knowledge_api.stores.tables.keys import SQLiteKeys


class BesideTheFile:
    """The side tables of a store, in the SQLite file beside it."""

    def side_tables(self, sqlite_path: Path) -> SideTables:
        return SideTables(
            SQLiteKeys(sqlite_path),
            SQLiteAudit(sqlite_path),
            SQLiteFeedback(sqlite_path),
            SQLiteJobs(sqlite_path),
        )
