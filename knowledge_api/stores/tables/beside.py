"""Where a store's deployment keeps its side tables (API keys, the audit trail,
answers and their ratings, upload jobs) when its own database does not hold them:
tables of the SQLite file at `sqlite_path` (the sqlite store's own file). A store
that keeps them in its own database (the Postgres schema) says so itself."""

from __future__ import annotations

from pathlib import Path

from knowledge_api.stores.tables.audit import AuditLog, SQLiteAudit
from knowledge_api.stores.tables.feedback import FeedbackLog, SQLiteFeedback
from knowledge_api.stores.tables.jobs import JobStore, SQLiteJobs
from knowledge_api.stores.tables.keys import KeyStore, SQLiteKeys


class BesideTheFile:
    """The side tables of a store, in the SQLite file beside it."""

    def key_store(self, sqlite_path: Path) -> KeyStore:
        """Where this store's deployment keeps its API keys: by default a table of the
        SQLite file at `sqlite_path` (the sqlite store's own file)."""
        return SQLiteKeys(sqlite_path)

    def audit_log(self, sqlite_path: Path) -> AuditLog:
        """Where this store's deployment keeps its audit trail: beside its API keys."""
        return SQLiteAudit(sqlite_path)

    def feedback_log(self, sqlite_path: Path) -> FeedbackLog:
        """Answered queries and their ratings: beside the API keys too."""
        return SQLiteFeedback(sqlite_path)

    def job_store(self, sqlite_path: Path) -> JobStore:
        """Where this store's deployment keeps its upload jobs: by default a table of
        the SQLite file at `sqlite_path`, like the keys."""
        return SQLiteJobs(sqlite_path)
