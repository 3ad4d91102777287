"""What the service writes down beside the index: a record of every write and who made
it (the audit trail), each query or answer computed and its readers' ratings, and the
upload jobs. Plain values; the stores keep them (stores/audit.py, feedback.py, jobs.py).
"""

from __future__ import annotations

import base64
import binascii
import getpass
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, date, datetime
from typing import Any

from knowledge_api import validation
from knowledge_api.errors import InvalidRequest
from knowledge_api.models import Document, IndexSummary
from knowledge_api.validation import collection_name


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
    source_type: str = ""
    """Its own source type, when the upload gave each file one; "": the job's."""


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
    dates: dict[str, str] = field(default_factory=dict)
    """The dates given to the documents of its files (created_at, updated_at)."""
    acl: list[str] | None = None
    """Who may read the job's documents (None: its source's own list, else public)."""

    def data(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_data(cls, data: str | dict[str, Any]) -> Job:
        values = json.loads(data) if isinstance(data, str) else dict(data)
        values["files"] = [JobFile(**file) for file in values.get("files", [])]
        return cls(**values)


# -- a page of the trail, as the doors ask for it --------------------------------------

MAX_PAGE = 200
MAX_ID = 2**63 - 1
"""The largest entry id a store keeps (a signed 64-bit integer)."""


def page_size(value: Any) -> int:
    try:
        size = int(value)
    except (TypeError, ValueError):
        size = 0
    if not 1 <= size <= MAX_PAGE:
        raise InvalidRequest("limit", f"must be an integer from 1 to {MAX_PAGE}")
    return size


def cursor_of(entry_id: int) -> str:
    return base64.urlsafe_b64encode(f"audit:{entry_id}".encode()).decode().rstrip("=")


def position(value: Any) -> int | None:
    """The entry id an opaque cursor stands for."""
    if value is None:
        return None
    try:
        decoded = base64.urlsafe_b64decode(str(value) + "=" * (-len(str(value)) % 4)).decode()
        kind, _, entry_id = decoded.partition(":")
        if kind == "audit" and entry_id.isdigit() and int(entry_id) <= MAX_ID:
            return int(entry_id)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        pass
    raise InvalidRequest("cursor", "must be the next_cursor of a previous page")


def moment(name: str) -> Any:
    def parse(value: Any) -> str | None:
        """A date (its midnight, UTC) or a date and time (UTC unless it says), within
        years 1 to 9999 once in UTC; empty, as absent: no bound."""
        if value is None or value == "":
            return None
        try:
            text = str(value).replace("Z", "+00:00")
            parsed = (
                datetime.fromisoformat(text)
                if "T" in text or " " in text
                else datetime.combine(date.fromisoformat(text), datetime.min.time())
            )
            return stamp(parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC))
        except ValueError:
            raise InvalidRequest(name, "must be an ISO 8601 date or date and time") from None
        except OverflowError:
            raise InvalidRequest(
                name, "must be a moment of the years 1 to 9999 once in UTC"
            ) from None

    return parse


def key_name(value: Any) -> str | None:
    return None if value is None else str(value)


def optional_collection(value: Any) -> str | None:
    return None if value is None else collection_name(value, "collection")


DEFAULT_PAGE = 50
AUDIT_PARAMETERS = ("limit", "cursor", "key", "collection", "since", "until")
"""What a page of the trail is asked by (GET /v1/knowledge/audit, `knowledge-api audit`)."""


def audit_query(values: dict[str, Any]) -> AuditQuery:
    """An audit page asked for by its parameters (query parameters, or the command's
    options); an unknown parameter is refused, as every listing refuses it."""
    validation.reject_unknown(values, list(AUDIT_PARAMETERS))
    return AuditQuery(
        limit=page_size(values.get("limit", DEFAULT_PAGE)),
        before=position(values.get("cursor")),
        actor=key_name(values.get("key")),
        collection=optional_collection(values.get("collection")),
        since=moment("since")(values.get("since")),
        until=moment("until")(values.get("until")),
    )
