"""Renderings the resources share: a search hit as a result, a document, a streamed
use case's events."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from knowledge_api import facets, ranking, spans
from knowledge_api.facets import Facets
from knowledge_api.models import (
    DEFAULT_COLLECTION,
    SETTINGS_RANKING,
    SOURCE_TYPES,
    Chunk,
    Document,
    Outcome,
    SearchHit,
)
from knowledge_api.principals import acl_of
from knowledge_api.ranking import MAX_OFFSET
from knowledge_api.validation import KEY_MAX_LENGTH, KEY_PATTERN, PRINCIPAL_PATTERN, REQUIRED
from knowledge_api.web.fields import (
    MAX_COLLECTIONS,
    Boolean,
    Choices,
    CollectionName,
    CollectionNames,
    Custom,
    Field,
    Filters,
    Integer,
    OneOf,
)
from knowledge_api.web.fields import Body as Request
from knowledge_api.web.schema import (
    BOOLEAN,
    INTEGER,
    NUMBER,
    SCALAR,
    STRING,
    Schema,
    array,
    enum,
    nullable,
    obj,
)
from knowledge_api.web.sse import Event, Translate

Body = dict[str, Any]
EXCERPT_CHARS = 240

SOURCE_TYPE = enum(*SOURCE_TYPES)
RESULT = obj(
    {
        "id": STRING,
        "content": STRING,
        "source_type": SOURCE_TYPE,
        "source_id": STRING,
        "similarity": NUMBER,
        "collection": {**STRING, "description": "The collection the passage is in."},
        "metadata": obj(
            {"title": STRING, "chunk_index": INTEGER, "document_id": STRING},
            {"section": STRING},
            extra=SCALAR,
        ),
        "expandable": BOOLEAN,
    },
    {"start": INTEGER, "end": INTEGER, "page": INTEGER},
)
"""A search hit as `result_view` renders it; its metadata is the document's plus these.
`start`, `end`: where the passage sits in its document's text, in code points (the
store knows them), `page` its PDF page."""

OFFSETS = OneOf(
    "offsets",
    "How offsets are counted: Unicode code points (Python's str indices) or UTF-16 "
    "code units (JavaScript's string indices).",
    "codepoints",
    allowed=spans.UNITS,
)
"""The unit of the offsets a route returns; chat routes default to utf16 (`CHAT_OFFSETS`)."""
CHAT_OFFSETS = OneOf("offsets", OFFSETS.description, "utf16", allowed=spans.UNITS)


def result_view(hit: SearchHit) -> Body:
    chunk = hit.chunk
    metadata = {
        **hit.metadata,
        "title": chunk.title,
        "chunk_index": chunk.chunk_index,
        "document_id": hit.document_id,
    }
    if chunk.section:
        metadata["section"] = chunk.section
    return {
        "id": chunk.id,
        "content": chunk.content,
        "source_type": hit.source_type,
        "source_id": hit.source_id,
        "similarity": round(hit.similarity, 4),
        "collection": hit.collection,
        "metadata": metadata,
        "expandable": chunk.chunk_count > 1,
        **placed(chunk),
    }


ACL: Schema = {
    **array({**STRING, "pattern": PRINCIPAL_PATTERN}),
    "description": "The principals that may read it (public, user:<id>, group:<name>); "
    "empty: closed, read by admin keys only.",
}


def acl_field(description: str, default: Any = None) -> Custom:
    """An access list of a request: a list of principals (absent: `default`)."""

    shown = default if default is REQUIRED else list(default)

    def check(value: Any) -> Any:
        return default if value is shown else acl_of(value)

    return Custom("acl", description, shown, check=check, shape=dict(ACL))


def placed(chunk: Chunk, text: str | None = None, unit: spans.Unit = "codepoints") -> Body:
    """The chunk's `start`, `end` in its document's `text` (counted in `unit`), and
    `page`: those it has."""
    body: Body = {}
    if chunk.start is not None and chunk.end is not None:
        if text is not None:
            body["start"] = spans.in_unit(text, chunk.start, unit)
            body["end"] = spans.in_unit(text, chunk.end, unit)
        else:
            body["start"], body["end"] = chunk.start, chunk.end
    if chunk.page is not None:
        body["page"] = chunk.page
    return body


CHUNK = obj(
    {"id": STRING, "chunk_index": INTEGER, "section": STRING, "content": STRING},
    {"start": INTEGER, "end": INTEGER, "page": INTEGER},
)
"""`start`, `end`: where the chunk sits in the document's `content` (its `content`
there with runs of whitespace as one space), in the request's `offsets` unit; absent
for a chunk stored before offsets were (`knowledge-api backfill-offsets`)."""
DOCUMENT: Schema = obj(
    {
        "id": STRING,
        "source_type": SOURCE_TYPE,
        "source_id": STRING,
        "title": STRING,
        "content": STRING,
        "metadata": obj({}, extra=SCALAR),
        "collection": STRING,
        "created_at": STRING,
        "updated_at": STRING,
        "acl": ACL,
        "chunks": array(CHUNK),
    }
)
"""A stored document as `document_view` renders it."""
SYNTHESIZER = obj(
    {
        "provider": STRING,
        "model": STRING,
        "tokens_used": nullable(INTEGER),
        "citations": array(INTEGER),
        "citations_removed": array(INTEGER),
        "skipped": array(obj({"provider": STRING, "reason": STRING})),
    }
)
"""Who wrote a synthesis or an answer (`SynthesisOutcome.view`)."""


SPAN = obj({"start": INTEGER, "end": INTEGER})
CITATION = obj(
    {
        "n": {**INTEGER, "minimum": 1},
        "chunk_id": STRING,
        "document_id": STRING,
        "quote": nullable(STRING),
        "passage": nullable(SPAN),
        "document": nullable(SPAN),
        "answer": SPAN,
    },
    {"unsupported": {"const": True}},
)
"""The words behind one citation marker (`Evidence.view`): `quote` is the document's
stored text at `document`, `passage` where it reads in the passage's content, `answer`
the cited sentence through its last marker; null and `unsupported` when no passage text
supports the sentence."""
CITATIONS = array(CITATION)


def citations_view(outcome: Outcome | None, unit: spans.Unit) -> list[Body]:
    """The evidence of every citation marker of an answer, its offsets in `unit`."""
    return [] if outcome is None else [found.view(unit) for found in outcome.evidence]


def excerpt(content: str, limit: int = EXCERPT_CHARS) -> str:
    flat = " ".join(content.split())
    return flat if len(flat) <= limit else flat[:limit].rsplit(" ", 1)[0] + " …"


def document_view(doc: Document, unit: spans.Unit = "codepoints") -> Body:
    return {
        "id": doc.id,
        "source_type": doc.source_type,
        "source_id": doc.source_id,
        "title": doc.title,
        "content": doc.content,
        "metadata": doc.metadata,
        "collection": doc.collection,
        "created_at": doc.created_at,
        "updated_at": doc.updated_at,
        "acl": list(doc.acl),
        "chunks": [
            {
                "id": c.id,
                "chunk_index": c.chunk_index,
                "section": c.section,
                "content": c.content,
                **placed(c, doc.content, unit),
            }
            for c in doc.chunks
        ],
    }


def zeroed_on_hit(timings: dict[str, float], cache_hit: bool) -> dict[str, float]:
    """A cache hit spent nothing on the steps that computed the value."""
    return {name: 0.0 for name in timings} if cache_hit else dict(timings)


# -- request fields the search resources share ----------------------------------------

SOURCES = Choices("sources", "Source types to search (all when absent).", None, SOURCE_TYPES)
STREAM = Boolean("stream", "Answer as Server-Sent Events.", False)
COLLECTION = CollectionName("collection", "The collection to search.", DEFAULT_COLLECTION)
COLLECTIONS = CollectionNames(
    "collections",
    "Several collections searched as one, instead of `collection`: one ranking over "
    f"their union (1-{MAX_COLLECTIONS} names; each must exist and be readable by the key).",
    None,
)


FILTERS = Filters(
    "filters",
    "What results must match: metadata keys and source_type, source_id, created_at, "
    'updated_at, each to a value or {operator: value}, e.g. {"app_under_test": "aoma", '
    '"created_at": {"$gte": "2026-01-01"}}.',
    None,
)
"""The filter of every route that searches (parsed into a hashable tree, part of a cache
key)."""


@dataclass(frozen=True)
class RankingChoices(Field):
    """A request's own ranking (knowledge_api.ranking); the settings' when absent."""

    def parse(self, body: dict[str, Any], default: Any) -> Any:
        return ranking.parse(body[self.name], self.name) if self.name in body else SETTINGS_RANKING

    def schema(self) -> Schema:
        return ranking.schema()


RANKING = RankingChoices("ranking", default=None)
OFFSET = Integer(
    "offset",
    "Results skipped: the page that starts there (`next_offset` of the page before).",
    0,
    low=0,
    high=MAX_OFFSET,
)
NEXT_OFFSET = {
    **nullable(INTEGER),
    "description": "The offset of the next page; null when no further page can be asked for.",
}
RANKING_RAN = obj(
    {
        "fusion": enum(*ranking.FUSIONS),
        "vector_weight": NUMBER,
        "prf": BOOLEAN,
        "recency": nullable(obj({"field": STRING, "half_life_days": NUMBER}, {"undated": INTEGER})),
        "reranker": STRING,
    }
)
"""What ranked the results (KnowledgeService.ranking_ran); recency's `undated` counts the
passages ranked without the date (counted as old as the oldest)."""


FACETS = Custom(
    "facets",
    "Fields whose values are counted over every match of the search (its collection, "
    "sources and filters), not only the results returned: metadata keys, source_type or "
    f"source_id. At most {facets.MAX_FIELDS} fields; the {facets.MAX_VALUES} most frequent "
    "values of each, most frequent first (`facets_cut` names a field that had more).",
    None,
    check=facets.parse,
    shape={
        "type": ["array", "null"],
        "items": {
            "type": "string",
            "minLength": 1,
            "maxLength": KEY_MAX_LENGTH,
            "pattern": KEY_PATTERN,
            "not": {"enum": list(facets.NOT_COUNTED)},
        },
        "maxItems": facets.MAX_FIELDS,
        "uniqueItems": True,
    },
)
"""The facets a search counts (knowledge_api.facets), part of the cache key."""
FACET_COUNTS = obj(
    {},
    extra={**obj({}, extra=INTEGER), "description": "Passages by value, most frequent first."},
)
FACETS_CUT = {
    **obj({}, extra=INTEGER),
    "description": "Fields that held more values than were returned: their distinct values.",
}


def facets_view(counted: Facets) -> Body:
    """`facets` (field -> value -> passages) and, when a field was cut, `facets_cut`."""
    body: Body = {"facets": {name: dict(found.counts) for name, found in counted.items()}}
    cut = {name: found.distinct for name, found in counted.items() if found.cut}
    if cut:
        body["facets_cut"] = cut
    return body


def search_body(name: str, query: Field, limit: str, threshold: Field, *own: Field) -> Request:
    """A search request: its query, the fields every search takes, and its own."""
    return Request(
        name,
        query,
        SOURCES,
        Integer("limit", limit, 5, low=1, high=20),
        threshold,
        *own,
        STREAM,
        FILTERS,
        COLLECTION,
        COLLECTIONS,
        RANKING,
    )


def translation(delta: str, done: Callable[[Any], Any]) -> Translate:
    """How a streamed use case's events reach the client: the passages as results (one
    source's own as source_results, tagged with the source), the
    text as `delta` events of the resource's name (`synthesis`, `answer`), `reset` as it
    is, and the resource's own rendering of the final value in `done`."""

    def translate(name: str, data: Any) -> Event:
        if name == "results":
            return "results", {"results": [result_view(hit) for hit in data]}
        if name == "source_results":
            source, hits = data
            return name, {"source": source, "results": [result_view(hit) for hit in hits]}
        if name == "delta":
            return delta, {"delta": data}
        if name == "done":
            return "done", done(data)
        return name, data

    return translate
