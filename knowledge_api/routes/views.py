"""Renderings the resources share: a search hit as a result, a document."""

from __future__ import annotations

from typing import Any

from knowledge_api.models import Document, SearchHit

Body = dict[str, Any]
EXCERPT_CHARS = 240


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
        "metadata": metadata,
        "expandable": chunk.chunk_count > 1,
    }


def excerpt(content: str, limit: int = EXCERPT_CHARS) -> str:
    flat = " ".join(content.split())
    return flat if len(flat) <= limit else flat[:limit].rsplit(" ", 1)[0] + " …"


def document_view(doc: Document) -> Body:
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
        "chunks": [
            {"id": c.id, "chunk_index": c.chunk_index, "section": c.section, "content": c.content}
            for c in doc.chunks
        ],
    }


def zeroed_on_hit(timings: dict[str, float], cache_hit: bool) -> dict[str, float]:
    """A cache hit spent nothing on the steps that computed the value."""
    return {name: 0.0 for name in timings} if cache_hit else dict(timings)
