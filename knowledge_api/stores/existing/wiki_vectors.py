"""Wiki pages by meaning (`knowledge-api migrate --wiki-vectors`): a `knowledge_embedding
vector(d)` column beside the TEXT `embedding` the other pipelines write (both are kept:
their readers go on reading the TEXT), filled in batches of one transaction each, so an
interrupted run resumes where it stopped; then its index and search function."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from knowledge_api.errors import ConfigurationError
from knowledge_api.stores.existing.adopt import (
    ACL_STEP,
    SEARCH_STEP,
    WIKI_COLUMN,
    WIKI_SEARCH_STEPS,
    applied_steps,
    apply,
    wiki_acl_step,
    wiki_column_step,
)
from knowledge_api.stores.postgres.codecs import register_codecs

WIKI_TEXT_CHARS = 8000
"""Of a page embedded anew (its TEXT vector empty or malformed): title and this much
markdown, about what an embedding model reads."""


@dataclass(slots=True)
class WikiConversion:
    converted: int = 0
    """Pages whose TEXT embedding became their vector."""
    embedded: int = 0
    """Pages whose TEXT embedding was empty or malformed, embedded anew."""


def parsed_vector(value: str | None, dimension: int) -> np.ndarray | None:
    """A TEXT embedding ('[0.1,0.2,...]') as a vector, or None when it is empty,
    malformed, of another dimension, not finite or all zeros."""
    if not value:
        return None
    try:
        numbers = orjson.loads(value)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(numbers, list) or len(numbers) != dimension:
        return None
    if not all(isinstance(n, int | float) and math.isfinite(n) for n in numbers):
        return None
    vector = np.asarray(numbers, dtype=np.float32)
    return vector if np.any(vector) else None


def page_text(title: str | None, markdown: str | None) -> str:
    return f"{title or ''}\n{markdown or ''}".strip()[:WIKI_TEXT_CHARS]


async def convert_wiki_vectors(
    conn: Any,
    embed: Callable[[list[str]], np.ndarray],
    dimension: int,
    batch_size: int,
    report: Callable[[str], None],
    progress: Callable[[WikiConversion], None] = lambda done: None,
) -> WikiConversion:
    """Give every wiki page a vector, then index and search them; resumes an
    interrupted run (pages that have their vector are not read again). `progress` hears
    of every committed batch."""
    done_steps = set(await applied_steps(conn))
    if SEARCH_STEP not in done_steps:
        raise ConfigurationError(
            "the database is not adopted: run `knowledge-api migrate --adopt` first"
        )
    stored = await conn.fetchval(
        "SELECT atttypmod FROM pg_attribute "
        "WHERE attrelid = 'siam_vectors'::regclass AND attname = 'embedding'"
    )
    if stored > 0 and stored != dimension:
        raise ConfigurationError(
            f"siam_vectors.embedding holds {stored}-d vectors and KNOWLEDGE_EMBEDDER makes "
            f"{dimension}-d ones: wiki pages must share the passages' vector space; set "
            "KNOWLEDGE_EMBEDDER to the embedder of siam_vectors"
        )
    if WIKI_COLUMN not in done_steps:
        await apply(conn, [wiki_column_step(dimension)], report)
    await register_codecs(conn)
    total = WikiConversion()
    after: Any = None
    while True:
        after, batch = await convert_wiki_batch(conn, embed, dimension, after, batch_size)
        if after is None:
            break
        total.converted += batch.converted
        total.embedded += batch.embedded
        progress(total)
    steps = [*WIKI_SEARCH_STEPS, *([wiki_acl_step()] if ACL_STEP in done_steps else [])]
    await apply(conn, [s for s in steps if s.name not in done_steps], report)
    return total


async def convert_wiki_batch(
    conn: Any, embed: Callable[[list[str]], np.ndarray], dimension: int, after: Any, size: int
) -> tuple[Any, WikiConversion]:
    """Fill knowledge_embedding of the next `size` pages lacking it (after id `after`,
    in id order), in one transaction; the last id seen (None when no page was left)."""
    after_id = "" if after is None else "AND id > $2 "
    rows = await conn.fetch(
        "SELECT id, embedding::text AS text_embedding, title::text, markdown_content::text "
        f"FROM wiki_documents WHERE knowledge_embedding IS NULL {after_id}ORDER BY id LIMIT $1",
        size,
        *([] if after is None else [after]),
    )
    if not rows:
        return None, WikiConversion()
    vectors = [parsed_vector(r["text_embedding"], dimension) for r in rows]
    missing = [i for i, vector in enumerate(vectors) if vector is None]
    if missing:
        fresh = embed([page_text(rows[i]["title"], rows[i]["markdown_content"]) for i in missing])
        for i, vector in zip(missing, fresh, strict=True):
            vectors[i] = vector
    async with conn.transaction():
        await conn.executemany(
            "UPDATE wiki_documents SET knowledge_embedding = $2 WHERE id = $1",
            [(r["id"], vector) for r, vector in zip(rows, vectors, strict=True)],
        )
    return rows[-1]["id"], WikiConversion(len(rows) - len(missing), len(missing))


async def remaining_wiki_pages(conn: Any) -> int:
    """Pages without a vector (every page before the vector column exists)."""
    lacking = (
        "WHERE knowledge_embedding IS NULL" if WIKI_COLUMN in await applied_steps(conn) else ""
    )
    count: int = await conn.fetchval(f"SELECT count(*) FROM wiki_documents {lacking}")
    return count
