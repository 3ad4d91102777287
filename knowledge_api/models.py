"""Dataclasses of the domain: documents, chunks, search hits and requests."""

from __future__ import annotations

import functools
import hashlib
import json
import re
import secrets
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Literal

import numpy as np

from knowledge_api.errors import InvalidRequest
from knowledge_api.filters import Node
from knowledge_api.principals import fingerprint, narrowed

SOURCE_TYPES = ("git", "jira", "knowledge", "wiki", "email", "metrics", "chat")
DEFAULT_COLLECTION = "default"
_NAMESPACE = uuid.UUID("6f1c2d0e-8b1a-4c55-9d5e-3a1f0b6c7d20")

Metadata = dict[str, Any]
Progress = Callable[[int], object]
"""A function a long run calls with the number of items (documents, passages) just done."""
SearchMode = Literal["hybrid", "vector", "keyword"]
SEARCH_MODES: tuple[SearchMode, ...] = ("hybrid", "vector", "keyword")


def content_hash(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


@functools.lru_cache(maxsize=65536)
def document_id(collection: str, source_type: str, source_id: str, source: str = "") -> str:
    """Stable uuid of a document: re-ingesting the same source finds the same row. The
    source that produced it is part of it, so two sources holding the same relative path
    (two repositories' README.md) keep a document each; a document of no source keeps
    the id it always had. Remembered: a document's id is asked for many times while it
    is chunked and compared (a mirror of 10,000 unchanged files asked 80,000 times)."""
    owner = f"\x1f{source}" if source else ""
    return uuid5(_NAMESPACE.bytes, f"{collection}\x1f{source_type}\x1f{source_id}{owner}")


def chunk_id(doc_id: str, index: int) -> str:
    return uuid5(uuid.UUID(doc_id).bytes, str(index))


def uuid5(namespace: bytes, name: str) -> str:
    """`str(uuid.uuid5(...))`, without building UUID objects (a third of the cost)."""
    digest = bytearray(hashlib.sha1(namespace + name.encode("utf-8")).digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x50
    digest[8] = (digest[8] & 0x3F) | 0x80
    h = digest.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


@dataclass(frozen=True, slots=True)
class EmbedderIdentity:
    """What a store records of the embedder that wrote its vectors: vectors of another
    name or dimension are never mixed with them."""

    name: str
    dimension: int


@dataclass(slots=True)
class Chunk:
    """A passage of a document, the unit that is embedded and searched."""

    id: str
    document_id: str
    chunk_index: int
    content: str
    title: str = ""
    section: str = ""
    embedding: np.ndarray | None = None
    chunk_count: int = 1
    start: int | None = None
    """Where the chunk sits in its document's text (code points): text[start:end] reads
    as the content, runs of whitespace as one space. None: not recorded (a chunk
    stored before offsets were, until `knowledge-api backfill-offsets`)."""
    end: int | None = None
    page: int | None = None
    """The page of a PDF (or a multi-page scan) the chunk is on."""

    @property
    def embedded_text(self) -> str:
        """What the embedder sees: the heading path gives a passage its context."""
        heading = " > ".join(part for part in (self.title, self.section) if part)
        return f"{heading}\n{self.content}" if heading else self.content

    @property
    def content_hash(self) -> str:
        return content_hash(self.embedded_text)


@dataclass(slots=True)
class Document:
    source_type: str
    source_id: str
    content: str
    title: str = ""
    metadata: Metadata = field(default_factory=dict)
    collection: str = DEFAULT_COLLECTION
    chunks: list[Chunk] = field(default_factory=list)
    created_at: str = ""
    updated_at: str = ""
    source: str = ""
    """The name of the source (an ingested path, a KB host, an upload) that produced it;
    empty for a document indexed on its own."""
    acl: tuple[str, ...] = ("public",)
    """The principals that may read it (knowledge_api.principals); empty: closed."""

    @property
    def id(self) -> str:
        return document_id(self.collection, self.source_type, self.source_id, self.source)

    @property
    def content_hash(self) -> str:
        """Hash of everything that reaches the store: unchanged hash, nothing to do. The
        source counts only when named, so documents stored before sources keep theirs."""
        meta = repr(sorted(self.metadata.items()))
        chunks = "\x1e".join(c.content_hash for c in self.chunks)
        owner = f"\x1f{self.source}" if self.source else ""
        # the ACL counts only when not public, so documents stored before keep theirs
        access = "" if self.acl == ("public",) else "\x1f" + ",".join(self.acl)
        return content_hash(f"{self.title}\x1f{meta}\x1f{chunks}{owner}{access}")

    def leading_columns(self) -> tuple[str, str, str, str, str, str]:
        """id, collection, source_type, source_id, title, content: the columns a stored
        document's row begins with, in the SQLite and the Postgres tables alike."""
        return (
            self.id,
            self.collection,
            self.source_type,
            self.source_id,
            self.title,
            self.content,
        )


@dataclass(slots=True)
class SearchHit:
    """A chunk found by search, with the facts fusion and the response need."""

    chunk: Chunk
    document_id: str
    source_type: str
    source_id: str
    metadata: Metadata
    score: float
    similarity: float
    created_at: str = ""
    """The stored document's dates, where the backend reads them with a hit (empty
    otherwise): what recency ranks by (knowledge_api.ranking)."""
    updated_at: str = ""
    collection: str = ""
    """The collection the passage is in: the store names it where a search looks in
    several, the service where it looks in one."""


@dataclass(frozen=True, slots=True)
class SentenceSupport:
    """How well a passage's sentences answer a question, as the offline synthesizer
    reads them."""

    meaning: float
    """The cosine of its sentence closest to the question."""
    answers: float
    """The score of its best sentence, by meaning and words as the answer is chosen (its
    place among the results aside)."""


@dataclass(frozen=True, slots=True)
class Recency:
    """Newer passages first: a hit's score is halved for every `half_life_days` of age of
    its date `field` (created_at, updated_at or a metadata key holding a date)."""

    field: str
    half_life_days: float


@dataclass(frozen=True, slots=True)
class Ranking:
    """A request's own ranking choices (knowledge_api.ranking); None leaves a choice to
    the settings (KNOWLEDGE_FUSION, KNOWLEDGE_VECTOR_WEIGHT, KNOWLEDGE_FEEDBACK_DOCS,
    KNOWLEDGE_RERANKER), and no recency unless asked."""

    fusion: str | None = None
    vector_weight: float | None = None
    prf: bool | None = None
    """The pseudo-relevance feedback round."""
    recency: Recency | None = None
    rerank: bool | None = None


SETTINGS_RANKING = Ranking()


class OneOrSeveral:
    """What a request searches: `collection`, or `collections` searched as one. Mixed
    into the frozen dataclasses of the requests that search, so each reads the two the
    same way."""

    __slots__ = ()
    collection: str
    collections: tuple[str, ...]

    def __post_init__(self) -> None:
        """`collections` sorted, each once; one alone is `collection` (the same request)."""
        names = tuple(sorted(set(self.collections)))
        if len(names) == 1:
            object.__setattr__(self, "collection", names[0])
            names = ()
        object.__setattr__(self, "collections", names)

    @property
    def searched(self) -> tuple[str, ...]:
        """The collections the request looks in."""
        return self.collections or (self.collection,)


@dataclass(frozen=True, slots=True)
class SearchFilters(OneOrSeveral):
    """Where a search looks: the source types, the filter tree (knowledge_api.filters)
    the passages must pass, and the collection."""

    source_types: tuple[str, ...] | None = None
    where: Node | None = None
    collection: str = DEFAULT_COLLECTION
    collections: tuple[str, ...] = ()
    """Several collections searched as one (their union, ranked as one collection
    would be); empty: `collection` alone."""


@dataclass(frozen=True, slots=True)
class DocumentSummary:
    """A stored document as a listing shows it: without its text and chunks."""

    id: str
    collection: str
    source_type: str
    source_id: str
    source: str
    title: str
    metadata: Metadata
    chunks: int
    updated_at: str
    created_at: str
    acl: tuple[str, ...] = ("public",)


@dataclass(frozen=True, slots=True)
class DocumentPage:
    """Which documents a listing asks for: those of `collection` (and of `source_type`,
    `source` when set) whose id comes after `after`, in id order, `limit` of them."""

    collection: str
    limit: int = 100
    after: str = ""
    source_type: str = ""
    source: str | None = None
    readers: frozenset[str] | None = None
    """Only the documents these principals may read (None: every one). A store that
    lists by an index of access lists applies it in its query; the catalog tests each
    listed document again, so a store may list the others too."""


@dataclass(frozen=True, slots=True)
class ReadableCount:
    """How many documents of one source of a collection some principals may read, and
    how many passages those documents hold."""

    collection: str
    source: str
    documents: int
    chunks: int


@dataclass(frozen=True, slots=True)
class SourceInfo:
    """A source of a collection: its documents stored and when it last ran."""

    collection: str
    name: str
    documents: int
    last_run: str
    root: str = ""
    """The folder (resolved) or base URL its files were read from, empty for a source of
    no files: another source reading one of them is refused."""
    connector: str = ""
    """A connector source's record as JSON (its kind, URL, settings, the names of the
    environment variables holding its secrets, its cursor and last error); empty for a
    source `ingest` or an upload fills."""


_DURATION = re.compile(r"(\d+)([smhd])")
DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True)
class KBHost:
    """A KB host the support collection is synced from (`sync --from`,
    KNOWLEDGE_KB_SYNC_URL): its root URL, bearer token and paging."""

    url: str
    token: str = field(default="", repr=False)
    page_size: int = 100
    timeout: float = 10.0


@dataclass(frozen=True)
class ConnectorSource:
    """A connector source as the store keeps it: no secret's value, only its name."""

    kind: str
    url: str
    settings: dict[str, str] = field(default_factory=dict)
    secrets: dict[str, str] = field(default_factory=dict)
    """Setting -> the name of the environment variable holding its value."""
    cursor: str = ""
    """Where the next incremental run starts; the connector's own (empty: from the start)."""
    last_error: str | None = None
    last_sync: str = ""
    """When a run last finished without an error (ISO 8601)."""
    last_prune: str = ""
    """When a run last listed every id of the service and pruned (ISO 8601)."""
    warning: str | None = None
    """What the last finished run found doubtful (a first sync that found nothing)."""
    members: dict[str, list[str]] = field(default_factory=dict)
    """The groups the source grants, from its service's permissions (without `group:`),
    and the user ids it gave each: what the next run takes back when they lapse."""
    scopes: dict[str, list[str]] = field(default_factory=dict)
    """Source-id prefix -> the access list its service gave every item under it at the
    last run (connectors/base.py, `Window.scopes`)."""

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ConnectorSource:
        raw: dict[str, Any] = json.loads(text)
        return cls(**{name: raw[name] for name in cls.__dataclass_fields__ if name in raw})

    def every(self, default: float) -> float:
        """Seconds between the service's syncs of the source: its `every` setting
        (`15m`, `1h30m`, `45s`, `1d`; `0`: never), else `default`."""
        value = self.settings.get("every", "").strip().lower()
        if not value:
            return default
        if value == "0":
            return 0.0
        parts = _DURATION.findall(value)
        if not parts or "".join(n + u for n, u in parts) != value:
            raise InvalidRequest(
                "settings.every", "must be a duration such as 15m, 1h or 1h30m, or 0"
            )
        return float(sum(int(n) * DURATION_UNITS[u] for n, u in parts))

    def moved(
        self,
        cursor: str,
        when: str,
        pruned: bool = False,
        warning: str | None = None,
        members: dict[str, list[str]] | None = None,
        scopes: dict[str, list[str]] | None = None,
    ) -> ConnectorSource:
        """The source after a run that stored its window (and pruned, when `pruned`),
        granting `members` and giving `scopes` their lists (as before when None)."""
        return replace(
            self,
            cursor=cursor,
            last_error=None,
            last_sync=when,
            last_prune=when if pruned else self.last_prune,
            warning=warning,
            members=self.members if members is None else members,
            scopes=self.scopes if scopes is None else scopes,
        )

    def failed(self, error: str) -> ConnectorSource:
        return replace(self, last_error=error)


@dataclass(frozen=True, slots=True)
class CollectionInfo:
    name: str
    documents: int | None
    """None: not counted (tables other pipelines fill)."""
    chunks: int | None
    sources: int
    updated_at: str


@dataclass(frozen=True, slots=True)
class IndexSummary:
    documents: int = 0
    chunks: int = 0
    embedded: int = 0
    skipped: int = 0

    def __add__(self, other: IndexSummary) -> IndexSummary:
        return IndexSummary(
            self.documents + other.documents,
            self.chunks + other.chunks,
            self.embedded + other.embedded,
            self.skipped + other.skipped,
        )


class CacheKey(tuple[Any, ...]):
    """A tier-1 key: a tuple whose hash is computed once. A tier looks a key up three
    times (cachetools' TTLCache: its expiry, its recency, its value), and hashing the
    tuple again each time (its Ranking's hash is Python code) cost a cache hit about
    a microsecond. Equal to, and hashed as, the plain tuple of its values."""

    hash: int

    def __new__(cls, values: tuple[Any, ...]) -> CacheKey:
        key = super().__new__(cls, values)
        key.hash = tuple.__hash__(key)
        return key

    def __hash__(self) -> int:
        return self.hash


KEYED_FIELDS: dict[type, tuple[str, ...]] = {}


def keyed_fields(params: type) -> tuple[str, ...]:
    """The fields of a kind of search parameters that its tier-1 key holds after the
    query (all of them), named once per kind: `fields` builds them anew at every call."""
    names = KEYED_FIELDS.get(params)
    if names is None:
        names = KEYED_FIELDS[params] = tuple(each.name for each in fields(params)[1:])
    return names


def normalize_query(text: str) -> str:
    """Case and spacing do not change the answer (the model is uncased)."""
    return " ".join(text.casefold().split())


@dataclass(frozen=True, slots=True)
class SearchParams(OneOrSeveral):
    """What a search-backed request asks: its text, where to look and what to keep."""

    query: str
    threshold: float = 0.2
    sources: tuple[str, ...] | None = None
    limit: int = 5
    filters: Node | None = None
    collection: str = DEFAULT_COLLECTION
    ranking: Ranking = SETTINGS_RANKING
    offset: int = 0
    """Results skipped: the page that starts there (see KnowledgeService.search)."""
    collections: tuple[str, ...] = ()
    """Two or more collections searched as one, sorted; empty: `collection` alone."""

    @property
    def scope(self) -> str | tuple[str, ...]:
        """What tier 1 keeps the answer under: the collection, or every one named."""
        return self.collections or self.collection

    principals: frozenset[str] | None = None
    """What the caller may read (knowledge_api.principals); None: everything."""

    def cache_key(self) -> CacheKey:
        """What the answer depends on, for tier 1: the kind of request and every
        parameter, the query normalised, the principals as a hash of their sorted list."""
        values = [
            fingerprint(self.principals) if name == "principals" else getattr(self, name)
            for name in keyed_fields(type(self))
        ]
        return CacheKey((type(self).__name__, normalize_query(self.query), *values))

    def search_filters(self) -> SearchFilters:
        """Where the search looks: narrowed to what the caller may read."""
        where = narrowed(self.filters, self.principals)
        return SearchFilters(self.sources, where, self.collection, self.collections)


Span = tuple[int, int]
"""(start, end) of a text in another, end exclusive."""


@dataclass(frozen=True, slots=True)
class Evidence:
    """The words behind one citation marker of an answer (knowledge_api.evidence): the
    passage text `quote` that supports the answer's sentence, where it sits in the
    passage's content and in the document's text, and where the sentence (through its
    last marker) sits in the answer. Each span in code points and in UTF-16 code units;
    no quote and no place when no passage text supports the sentence."""

    n: int
    chunk_id: str
    document_id: str
    answer: Span
    answer_utf16: Span
    quote: str | None = None
    passage: Span | None = None
    passage_utf16: Span | None = None
    document: Span | None = None
    document_utf16: Span | None = None
    support: float = 0.0
    """How closely the quote reads as the sentence, 0 to 1 (1: quoted as it is)."""

    @property
    def supported(self) -> bool:
        return self.quote is not None

    def view(self, unit: str = "codepoints") -> dict[str, Any]:
        """The citation as responses show it, its offsets in `unit`."""
        utf16 = unit == "utf16"

        def place(points: Span | None, units: Span | None) -> dict[str, int] | None:
            chosen = units if utf16 else points
            return None if chosen is None else {"start": chosen[0], "end": chosen[1]}

        body: dict[str, Any] = {
            "n": self.n,
            "chunk_id": self.chunk_id,
            "document_id": self.document_id,
            "quote": self.quote,
            "passage": place(self.passage, self.passage_utf16),
            "document": place(self.document, self.document_utf16),
            "answer": place(self.answer, self.answer_utf16),
        }
        if not self.supported:
            body["unsupported"] = True
        return body


@dataclass(slots=True)
class Outcome:
    """What the chain wrote, who wrote it, and what happened on the way."""

    text: str
    provider: str
    model: str
    temperature: float
    tokens_used: int | None
    passages: tuple[SearchHit, ...]
    citations: list[int]
    citations_removed: list[int]
    skipped: list[dict[str, str]] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    """Links that failed (not merely skipped): the answer is a degraded one."""
    evidence: tuple[Evidence, ...] = ()
    """The words behind each citation marker of `text`, in the order of the markers."""

    def view(self) -> dict[str, Any]:
        return {
            "provider": self.provider,
            "model": self.model,
            "tokens_used": self.tokens_used,
            "citations": self.citations,
            "citations_removed": self.citations_removed,
            "skipped": self.skipped,
        }

    def warnings(self) -> list[str]:
        return [f"synthesis: {reason}; answered by {self.provider}" for reason in self.failed]


TOKEN_PREFIX = "kapi_"
TOKEN_BYTES = 32


@dataclass(frozen=True, slots=True)
class ApiKey:
    """A key as it is kept: the SHA-256 of its token (the token itself is shown once and
    never stored), its scopes, and the collections it may reach."""

    name: str
    key_hash: str
    scopes: tuple[str, ...]
    collections: tuple[str, ...] | None
    """None: every collection."""
    created_at: str = ""
    user: str = ""
    """The id of the user the key reads as (knowledge_api.principals); '' for none."""
    groups: tuple[str, ...] = ()
    """Groups the key's own principals hold, beside those the service knows for `user`."""

    @classmethod
    def issued(
        cls,
        name: str,
        scopes: tuple[str, ...],
        collections: tuple[str, ...] | None,
        user: str = "",
        groups: tuple[str, ...] = (),
    ) -> tuple[ApiKey, str]:
        """A new key and its token: a random one (32 bytes of entropy), recognisable
        by its prefix."""
        token = TOKEN_PREFIX + secrets.token_urlsafe(TOKEN_BYTES)
        return cls(name, token_hash(token), scopes, collections, "", user, groups), token


def token_hash(token: str) -> str:
    """Tokens are random, so one SHA-256 is enough: there is nothing to guess."""
    return hashlib.sha256(token.encode()).hexdigest()
