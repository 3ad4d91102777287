"""Tables kept beside a store's data: API keys, the audit trail, feedback, upload jobs."""

from __future__ import annotations

from dataclasses import dataclass

from knowledge_api.stores.tables.audit import AuditLog
from knowledge_api.stores.tables.feedback import FeedbackLog
from knowledge_api.stores.tables.jobs import JobStore
from knowledge_api.stores.tables.keys import KeyStore


@dataclass(frozen=True, slots=True)
class SideTables:
    """What a deployment keeps besides the index, where its store decides once for all
    four: in the store's own database (the Postgres schema, seen by every replica) or
    in the SQLite file beside it (`beside.py`)."""

    keys: KeyStore
    audit: AuditLog
    feedback: FeedbackLog
    """Answered queries and their ratings."""
    jobs: JobStore
    """Upload jobs."""
