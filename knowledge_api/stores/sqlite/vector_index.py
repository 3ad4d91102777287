"""An exact in-memory vector index: a float32 matrix searched with one matrix product.

Rows carry an integer key (the store's row id) and a label code (collection and
source type) so the common filters are a vectorised mask, not a query.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

Collections = str | Sequence[str]
"""The collection a search looks in, or the several it looks in as one."""


class LabelledIndex:
    """What both vector indexes share: a code per (collection, source type) label of
    their rows, so the common filters are a mask over the rows (None: every row), and
    the candidates of a query a search within that mask."""

    exact: bool
    """Whether the scores are exact cosines (else approximate: the caller rescores)."""
    _label_codes: dict[tuple[str, str], int]

    def covers(self, collection: Collections, source_types: Sequence[str] | None) -> bool:
        """Whether every row is in `collection` and of `source_types` (all when None)."""
        return covers(self._label_codes, collection, source_types)

    def mask(
        self,
        collection: Collections,
        source_types: Sequence[str] | None,
        allowed: np.ndarray | None,
    ) -> np.ndarray | None:
        """The rows (a mask over them) in `collection`, of `source_types` (all when None),
        whose row ids `allowed` holds (a mask over row ids; all when None); None when
        that is every row."""
        everywhere = self.covers(collection, source_types)
        if allowed is None and everywhere:
            return None
        labels = self._row_labels()
        if everywhere:
            mask = labels >= 0
        else:
            mask = np.isin(labels, label_codes(self._label_codes, collection, source_types))
        if allowed is not None:
            mask &= self._allowed_rows(allowed)
        return mask

    def _row_labels(self) -> np.ndarray:
        """The label code of each row (-1: no row there)."""
        raise NotImplementedError

    def _allowed_rows(self, allowed: np.ndarray) -> np.ndarray:
        """Whether the mask over row ids `allowed` holds the id of each row."""
        raise NotImplementedError

    def search(self, query: np.ndarray, n: int, mask: np.ndarray | None) -> list[tuple[int, float]]:
        raise NotImplementedError

    def candidates(
        self,
        query: np.ndarray,
        n: int,
        collection: Collections,
        source_types: Sequence[str] | None,
        allowed: np.ndarray | None,
    ) -> list[tuple[int, float]]:
        """(key, cosine) of the n best rows the filters allow (`allowed`: a mask over
        row ids, None for all), best first (of about the n best, by approximate
        cosines, when the index is not `exact`)."""
        return self.search(query, n, self.mask(collection, source_types, allowed))


class VectorIndex(LabelledIndex):
    exact = True

    def __init__(self, dimension: int, capacity: int = 1024) -> None:
        self.dimension = dimension
        self._vectors = np.zeros((capacity, dimension), dtype=np.float32)
        self._keys = np.zeros(capacity, dtype=np.int64)
        self._labels = np.zeros(capacity, dtype=np.int32)
        self._size = 0
        self._row: dict[int, int] = {}
        self._label_codes: dict[tuple[str, str], int] = {}

    def __len__(self) -> int:
        return self._size

    def add(
        self, keys: Sequence[int], vectors: np.ndarray, labels: Sequence[tuple[str, str]]
    ) -> None:
        """Appended as one block (a store's start loads every row through here)."""
        if not len(keys) == len(vectors) == len(labels):
            raise ValueError("keys, vectors and labels differ in length")
        self.remove(keys)
        start, end = self._size, self._size + len(keys)
        self._reserve(end)
        codes = self._label_codes
        self._vectors[start:end] = vectors
        self._keys[start:end] = keys
        self._labels[start:end] = [codes.setdefault(label, len(codes)) for label in labels]
        self._row.update(zip(keys, range(start, end), strict=True))
        self._size = end

    def remove(self, keys: Iterable[int]) -> None:
        for key in keys:
            row = self._row.pop(key, None)
            if row is None:
                continue
            last = self._size - 1
            if row != last:
                moved = int(self._keys[last])
                self._vectors[row] = self._vectors[last]
                self._keys[row] = moved
                self._labels[row] = self._labels[last]
                self._row[moved] = row
            self._size = last

    def _row_labels(self) -> np.ndarray:
        return self._labels[: self._size]

    def _allowed_rows(self, allowed: np.ndarray) -> np.ndarray:
        return allowed_at(allowed, self._keys[: self._size])

    def search(self, query: np.ndarray, n: int, mask: np.ndarray | None) -> list[tuple[int, float]]:
        """(key, cosine) of the n best rows allowed by `mask`, best first."""
        rows = None if mask is None else np.flatnonzero(mask)
        if rows is None or rows.size == self._size:
            rows = None  # every row: the product over the block itself, not a copy of it
            scores = self._vectors[: self._size] @ query
        else:
            scores = self._vectors[rows] @ query
        if scores.size == 0:
            return []
        n = min(n, scores.size)
        top = np.argpartition(-scores, n - 1)[:n]
        top = top[np.argsort(-scores[top], kind="stable")]
        chosen = top if rows is None else rows[top]
        return list(zip(self._keys[chosen].tolist(), scores[top].tolist(), strict=True))

    def memory_bytes(self) -> int:
        return self._vectors.nbytes + self._keys.nbytes + self._labels.nbytes

    def similarities(self, keys: Iterable[int], query: np.ndarray) -> dict[int, float]:
        present = [k for k in keys if k in self._row]
        if not present:
            return {}
        scores = self._vectors[[self._row[k] for k in present]] @ query
        return dict(zip(present, scores.tolist(), strict=True))

    def _reserve(self, size: int) -> None:
        capacity = len(self._keys)
        if size <= capacity:
            return
        while capacity < size:
            capacity *= 2
        self._vectors = _grow(self._vectors, capacity)
        self._keys = _grow(self._keys, capacity)
        self._labels = _grow(self._labels, capacity)


def label_codes(
    codes: dict[tuple[str, str], int], collection: Collections, source_types: Sequence[str] | None
) -> list[int]:
    """The codes of the (collection, source type) labels the filters allow."""
    names = (collection,) if isinstance(collection, str) else collection
    return [
        code
        for (coll, source_type), code in codes.items()
        if coll in names and (source_types is None or source_type in source_types)
    ]


def covers(
    codes: dict[tuple[str, str], int], collection: Collections, source_types: Sequence[str] | None
) -> bool:
    """Whether the filters allow every label an index has given a code (codes outlive
    their last row, so a False can be needless, never a True wrong for those rows)."""
    return len(label_codes(codes, collection, source_types)) == len(codes)


def _grow(array: np.ndarray, capacity: int) -> np.ndarray:
    grown = np.zeros((capacity, *array.shape[1:]), dtype=array.dtype)
    grown[: len(array)] = array
    return grown


def allowed_at(allowed: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Whether the mask over row ids `allowed` holds each of `keys` (row ids past its
    end: no)."""
    inside = keys < allowed.size
    found = np.zeros(keys.size, dtype=bool)
    found[inside] = allowed[keys[inside]]
    return found
