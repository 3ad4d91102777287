"""Which query terms a bounded keyword search over an FTS5 index leaves out.

FTS5 computes BM25 for every chunk a query matches before it keeps the best few (about
2 µs a chunk: the positions of each term and the chunk's length are read), so a query
whose terms are found in a quarter of a million chunks scores a quarter of a million
rows (seconds on two cores) although the commonest terms, by their low inverse document
frequency, hardly move the ranking. So a query ranks a bounded number of chunks
(KNOWLEDGE_KEYWORD_MATCHED_CHUNKS, 5,000 by default): its terms are taken rarest first
while their chunk counts add up to no more than that, and the rest (the commonest) are
left out of the match; the rarest is always kept, and when it alone matches more chunks
than that (a query of one common word), only as many of its newest matches are ranked.
The work per query is then bounded whatever the size of the store, and in a store of no
more chunks than that nothing is ever left out."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

MATCHED_CHUNKS = 5000
CACHED_TERMS = 100_000

_SCRATCH = """
CREATE VIRTUAL TABLE scratch USING fts5 (
    text, content = '', tokenize = 'porter unicode61 remove_diacritics 2'
);
CREATE VIRTUAL TABLE scratch_terms USING fts5vocab (scratch, 'instance');
"""
_NO_STEM = ""
"""The stem remembered for a term that does not make exactly one token."""
_VOCABULARY = """CREATE VIRTUAL TABLE IF NOT EXISTS temp.chunks_terms
    USING fts5vocab (main, chunks_fts, 'row')"""


@dataclass(frozen=True, slots=True)
class Bounded:
    """The terms a keyword query ranks by, and how many of their newest matches it
    ranks when they are too many to rank every one (0: every one)."""

    terms: list[str]
    newest: int = 0

    def first_rowid(self, conn: sqlite3.Connection, match: str) -> int:
        """The rowid from which the query ranks: that of its `newest`-th newest match
        (found by walking the index backwards, without ranking), or 0."""
        if not self.newest:
            return 0
        row = conn.execute(
            "SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ? ORDER BY rowid DESC "
            "LIMIT 1 OFFSET ?",
            (match, self.newest - 1),
        ).fetchone()
        return int(row[0]) if row else 0


class TermFrequencies:
    """Chunk counts of query terms in the store's FTS5 index, remembered until the
    store's size moves by more than an eighth: they only bound the work of a query, so
    a few writes since they were counted change nothing that matters, while counting a
    term found in most of a large store again after every write would cost each next
    query a walk over that term's whole index entry. Used by one thread at a time (the
    store's reader thread)."""

    def __init__(self, matched_chunks: int = MATCHED_CHUNKS) -> None:
        self.matched_chunks = matched_chunks
        self._scratch = sqlite3.connect(":memory:", check_same_thread=False)
        self._scratch.executescript(_SCRATCH)
        self._chunks: dict[str, int] = {}
        self._stemmed: dict[str, str] = {}
        """Each term's stem, once stemmed: the stemmer's answer never changes, and
        stemming one (a write to the scratch index) cost a query more than a lookup."""
        self._counted_at = 0
        """The store's chunks when the counts remembered were taken."""

    def _store_is(self, chunks: int) -> None:
        """Forget the counts once the store's size moved by more than an eighth."""
        if abs(chunks - self._counted_at) * 8 > self._counted_at:
            self._chunks.clear()
            self._counted_at = chunks

    def bounded(self, conn: sqlite3.Connection, terms: Sequence[str], chunks: int) -> Bounded:
        """`terms` (in their order) without the commonest, so that the chunk counts of
        those kept add up to no more than `matched_chunks`; the rarest is always kept,
        and when it alone matches more, only the newest of its matches are ranked.
        All of them, every match, in a store of no more than that many `chunks`."""
        self._store_is(chunks)
        limit = self.matched_chunks
        stems = None if chunks <= limit else self._stems(terms)
        if stems is None:
            return Bounded(list(terms))
        counts = self._counts(conn, stems)
        kept: set[str] = set()
        total = 0
        for stem in sorted(dict.fromkeys(stems), key=counts.__getitem__):  # ties: query order
            if kept and total + counts[stem] > limit:
                break
            kept.add(stem)
            total += counts[stem]
        kept_terms = [t for t, s in zip(terms, stems, strict=True) if s in kept]
        return Bounded(kept_terms, newest=limit if total > limit else 0)

    def _stems(self, terms: Sequence[str]) -> list[str] | None:
        """Each term as the index holds it (SQLite's own Porter stemmer), in order; None
        if a term does not make exactly one token."""
        missing = [t for t in dict.fromkeys(terms) if t not in self._stemmed]
        if missing:
            if len(self._stemmed) > CACHED_TERMS:
                self._stemmed.clear()
            self._stemmed.update(self._stem(missing))
        stems = [self._stemmed[t] for t in terms]
        return None if _NO_STEM in stems else stems

    def _stem(self, terms: list[str]) -> dict[str, str]:
        """The stem of each of `terms`, each indexed as its own row of the scratch
        index; `_NO_STEM` for one that makes no token or several. A number is its own
        stem, without the index: the tokenizer keeps ASCII digits as one token and the
        Porter stemmer changes only letters; a number new to the process (a year, a
        version, a ticket) is common in queries, and stemming one in the index was
        half of what bounding such a query cost (a write to the scratch index)."""
        stems = {term: term for term in terms if term.isascii() and term.isdigit()}
        words = [term for term in terms if term not in stems]
        return {**stems, **self._indexed_stems(words)} if words else stems

    def _indexed_stems(self, terms: list[str]) -> dict[str, str]:
        with self._scratch:
            # contentless: emptied without reading back what it holds
            self._scratch.execute("INSERT INTO scratch (scratch) VALUES ('delete-all')")
            self._scratch.executemany(
                "INSERT INTO scratch (rowid, text) VALUES (?, ?)", enumerate(terms)
            )
            rows = self._scratch.execute("SELECT doc, term FROM scratch_terms").fetchall()
        tokens: dict[int, list[str]] = {}
        for row, stem in rows:
            tokens.setdefault(row, []).append(stem)
        found = {i: found[0] for i, found in tokens.items() if len(found) == 1}
        return {term: found.get(i, _NO_STEM) for i, term in enumerate(terms)}

    def _counts(self, conn: sqlite3.Connection, stems: Sequence[str]) -> dict[str, int]:
        missing = [s for s in dict.fromkeys(stems) if s not in self._chunks]
        if missing:
            if len(self._chunks) > CACHED_TERMS:
                self._chunks.clear()
            conn.execute(_VOCABULARY)
            marks = ",".join("?" * len(missing))
            found = conn.execute(
                f"SELECT term, doc FROM temp.chunks_terms WHERE term IN ({marks})", missing
            ).fetchall()
            self._chunks.update({s: 0 for s in missing})
            self._chunks.update({term: int(doc) for term, doc in found})
        return {s: self._chunks[s] for s in stems}
