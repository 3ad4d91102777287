"""What the service writes down beside the index: a record of every write and who made
it (the audit trail), each query or answer computed and its readers' ratings, and the
upload jobs. Plain values; the stores keep them (stores/audit.py, feedback.py, jobs.py).
"""

from __future__ import annotations

import getpass
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from knowledge_api.models import Document, IndexSummary


@dataclass(frozen=True, slots=True)
class Actor:
    """Who writes: an API key's name (or `cli:<user>`, `kb-sync`), and the id of the
    request it came with, when it came over HTTP."""

    name: str
    request_id: str | None = None


def json_view(record: Any, names: str) -> dict[str, Any]:
    """`record` as JSON: each of `names` (`name`, or `name:attribute` where they differ)
    in order."""
    pairs = (name.partition(":") for name in names.split())
    return {name: getattr(record, attribute or name) for name, _, attribute in pairs}


@dataclass(frozen=True, slots=True)
class AuditEntry:
    actor: str
    action: str
    """The route's method and template, `mcp <tool>`, or the command (`cli ingest`)."""
    collection: str | None
    changes: dict[str, Any]
    """What changed: ids and counts."""
    request_id: str | None = None
    at: str = ""
    """UTC, to the microsecond (`2026-01-31T12:00:00.000000Z`); set when appended."""
    id: int = 0

    def view(self) -> dict[str, Any]:
        return json_view(self, "id at key:actor action collection changes request_id")


@dataclass(frozen=True, slots=True)
class AuditQuery:
    """A page of the trail: newest first, older than `before` (an entry's id)."""

    limit: int = 50
    before: int | None = None
    actor: str | None = None
    collection: str | None = None
    since: str | None = None
    """Entries at or after (a stamp as `stamp` writes it)."""
    until: str | None = None
    """Entries before."""


def local_user() -> Actor:
    """Who writes from the command line (or MCP over stdio): `cli:<login name>`."""
    try:
        name = getpass.getuser()
    except (KeyError, OSError):
        name = "unknown"
    return Actor(f"cli:{name}")


def stamp(moment: datetime | None = None) -> str:
    """A moment as the trail writes it: UTC, fixed width, so text compares as time."""
    return (moment or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


MAX_AUDITED_IDS = 1000
"""Ids one audit record lists at most (a bigger write lists these and counts them all)."""


def changes(
    documents: Sequence[Document] | None = None,
    summary: IndexSummary | None = None,
    *,
    ids: Sequence[str] | None = None,
    **more: Any,
) -> dict[str, Any]:
    """What a write changed, as its audit record says it: the documents' ids (of
    `documents`, or `ids`; at most MAX_AUDITED_IDS) and how many they are, the index
    summary's counts, and any other counts or ids."""
    changed: dict[str, Any] = {}
    if documents is not None:
        ids = [doc.id for doc in documents]
    if ids is not None:
        distinct = list(dict.fromkeys(ids))
        changed["ids"] = distinct[:MAX_AUDITED_IDS]
        changed["documents"] = len(distinct)
    if summary is not None:
        changed.update(
            indexed=summary.documents,
            chunks=summary.chunks,
            embedded=summary.embedded,
            unchanged=summary.skipped,
        )
    return {**changed, **more}


@dataclass(frozen=True, slots=True)
class Answered:
    """A computed query or answer: what it asked, how it ranked, what it returned."""

    query_id: str
    kind: str
    """query or answer."""
    collection: str
    query: str
    ranking: dict[str, Any]
    """The settings that ranked it (fusion, reranker, embedder, limit, threshold...)."""
    results: list[dict[str, Any]]
    """Each result in order: id, document_id, source_type, source_id."""
    cited: list[int] = field(default_factory=list)
    """The citation numbers of the answer (1-based positions in `results`)."""
    at: str = ""


@dataclass(frozen=True, slots=True)
class Rating:
    query_id: str
    rating: str
    """up or down."""
    key: str
    comment: str | None = None
    cited: list[int] | None = None
    """The citations the reader found right (1-based), when said."""
    expected_source: str | None = None
    """The source (a source_id or document id) the reader expected, when said."""
    request_id: str | None = None
    at: str = ""
    id: int = 0

    def view(self) -> dict[str, Any]:
        return json_view(self, "id at query_id rating comment cited expected_source key request_id")


QUEUED, RUNNING, DONE, FAILED = "queued", "running", "done", "failed"
UNFINISHED = (QUEUED, RUNNING)


@dataclass(slots=True)
class JobFile:
    name: str
    """The file's name as it was sent."""
    stored: str
    """Its file in the job's folder (never the name sent, which may hold `../`)."""
    size: int
    state: str = "pending"
    """pending, done or failed."""
    reason: str = ""
    chunks: int = 0


@dataclass(slots=True)
class Job:
    id: str
    collection: str
    source_type: str
    source: str
    owner: str
    """The service (host and upload folder) that holds the job's files."""
    files: list[JobFile] = field(default_factory=list)
    status: str = QUEUED
    reason: str = ""
    """Why the job failed."""
    chunks_done: int = 0
    chunks_total: int = 0
    embedded: int = 0
    """Passages embedded anew (none for text whose vectors the store holds)."""
    created_at: str = ""
    updated_at: str = ""
    acl: list[str] | None = None
    """Who may read the job's documents (None: its source's own list, else public)."""

    def data(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_data(cls, data: str | dict[str, Any]) -> Job:
        values = json.loads(data) if isinstance(data, str) else dict(data)
        values["files"] = [JobFile(**file) for file in values.get("files", [])]
        return cls(**values)
