"""An approximate vector index for large stores: int8 codes in inverted lists (faiss IVF-SQ8).

At a million 384-d chunks the exact float32 matrix (`VectorIndex`) takes 1.5 GB and a
full scan reads all of it for every query. Here each vector is one byte per dimension
(a quarter of the memory), grouped by its nearest of about sqrt(N) centroids; a query
scans only the lists of its nearest centroids. The scores are approximate, so the
caller rescores the shortlist with the exact float32 vectors it keeps (the SQLite
store reads them back from its file) and returns exact cosines.

Rows are keyed by the store's row id; a label code per row id (collection and source
type) turns the common filters into a bitmap faiss skips rows by, and a filter that
keeps a fraction f of the rows probes 1/f times more lists, so the rows it scans stay
as many: a narrow filter scans every list, which is an exact search over its rows.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from knowledge_api.registry import import_extra
from knowledge_api.stores.sqlite.vector_index import (
    LabelledIndex,
    allowed_at,
)

DEFAULT_PROBES = 16
WIDE_SHARE = 0.25
"""From this share of the rows, a mask is tried after an unfiltered search first."""
TRAINING_ROWS_PER_LIST = 40
"""faiss asks for 39 training vectors per list at least."""


def faiss_module() -> Any:
    """faiss, imported on first use (an optional extra)."""
    faiss = import_extra("faiss", "ann")
    faiss.omp_set_num_threads(1)  # one query is small work: threads would only contend
    return faiss


def list_count(rows: int) -> int:
    """Inverted lists for `rows` vectors: about sqrt(rows), so a list holds as many."""
    return max(16, int(math.sqrt(rows)))


class QuantizedIndex(LabelledIndex):
    exact = False

    def __init__(self, index: Any, labels: np.ndarray, codes: dict[tuple[str, str], int]) -> None:
        self._faiss = faiss_module()
        self._index = index
        self._label_of = labels
        """Label code of each row id (-1: no such row)."""
        self._label_codes = codes
        self.probes = DEFAULT_PROBES

    @classmethod
    def trained(cls, sample: np.ndarray, rows: int) -> QuantizedIndex:
        """An empty index whose lists and code ranges are learnt from `sample`, sized for
        about `rows` vectors."""
        faiss = faiss_module()
        dimension = sample.shape[1]
        lists = min(list_count(rows), max(1, len(sample) // TRAINING_ROWS_PER_LIST))
        index = faiss.IndexIVFScalarQuantizer(
            faiss.IndexFlatIP(dimension),
            dimension,
            lists,
            faiss.ScalarQuantizer.QT_8bit,
            faiss.METRIC_INNER_PRODUCT,
        )
        index.cp.niter = 10
        index.train(np.ascontiguousarray(sample, dtype=np.float32))
        return cls(index, np.full(0, -1, dtype=np.int32), {})

    def __len__(self) -> int:
        return int(self._index.ntotal)

    @property
    def dimension(self) -> int:
        return int(self._index.d)

    def memory_bytes(self) -> int:
        """What the index holds in memory: codes, row ids, centroids and labels."""
        per_row = int(self._index.code_size) + 8
        centroids = int(self._index.nlist) * self.dimension * 4
        return len(self) * per_row + centroids + int(self._label_of.nbytes)

    def add(
        self, keys: Sequence[int], vectors: np.ndarray, labels: Sequence[tuple[str, str]]
    ) -> None:
        if not len(keys):
            return
        self.remove(keys)
        ids = np.asarray(keys, dtype=np.int64)
        self._reserve(int(ids.max()) + 1)
        self._label_of[ids] = [
            self._label_codes.setdefault(label, len(self._label_codes)) for label in labels
        ]
        self._index.add_with_ids(np.ascontiguousarray(vectors, dtype=np.float32), ids)

    def remove(self, keys: Iterable[int]) -> None:
        ids = np.asarray(list(keys), dtype=np.int64)
        ids = ids[(ids < len(self._label_of)) & (ids >= 0)]
        ids = ids[self._label_of[ids] >= 0]
        if ids.size:
            self._index.remove_ids(self._faiss.IDSelectorBatch(ids))
            self._label_of[ids] = -1

    def search(self, query: np.ndarray, n: int, mask: np.ndarray | None) -> list[tuple[int, float]]:
        """(key, approximate cosine) of about the n best rows `mask` allows, best first.

        A mask allowing a wide share of the rows (a reader's principals allowing half
        the store) is first tried after the search: the best rows of the whole index,
        twice as many as the share should hold n of, keep their n best allowed ones when
        n pass. Probing `probes / share` clusters under a bitmap instead cost 2.5 times
        the unfiltered search at 200,000 passages for half of them."""
        if mask is not None and not mask.any():
            return []
        fraction = 1.0 if mask is None else mask.sum() / max(len(self), 1)
        if mask is not None and fraction >= WIDE_SHARE:
            wanted = math.ceil(2 * n / fraction)
            best = self._searched(query, wanted, None, 1.0)
            keys = np.array([key for key, _ in best], dtype=np.int64)
            passing = [hit for hit, keep in zip(best, allowed_at(mask, keys), strict=True) if keep]
            if len(passing) >= n or len(best) < wanted:
                return passing[:n]
        return self._searched(query, n, mask, fraction)

    def _searched(
        self, query: np.ndarray, n: int, mask: np.ndarray | None, fraction: float
    ) -> list[tuple[int, float]]:
        params = self._faiss.SearchParametersIVF(
            nprobe=min(self._index.nlist, math.ceil(self.probes / fraction))
        )
        if mask is not None:
            bitmap = np.packbits(mask, bitorder="little")
            params.sel = self._faiss.IDSelectorBitmap(mask.size, self._faiss.swig_ptr(bitmap))
        scores, ids = self._index.search(
            np.ascontiguousarray(query, dtype=np.float32).reshape(1, -1), n, params=params
        )
        found = ids[0] >= 0
        return list(zip(ids[0][found].tolist(), scores[0][found].tolist(), strict=True))

    def _row_labels(self) -> np.ndarray:
        return self._label_of

    def _allowed_rows(self, allowed: np.ndarray) -> np.ndarray:
        """A row's id is its place: `allowed` cut or padded to the rows."""
        found = np.zeros(len(self._label_of), dtype=bool)
        size = min(found.size, allowed.size)
        found[:size] = allowed[:size]
        return found

    def _reserve(self, size: int) -> None:
        if size > len(self._label_of):
            grown = np.full(max(size, 2 * len(self._label_of)), -1, dtype=np.int32)
            grown[: len(self._label_of)] = self._label_of
            self._label_of = grown

    # -- persistence ----------------------------------------------------------------

    def save(self, path: Path, identity: dict[str, Any]) -> None:
        """Write the index beside the store's file, each part atomically, the identity of
        the data it holds last (a reader that finds an older identity rebuilds)."""
        meta = {**identity, "labels": [list(label) for label in self._label_codes]}
        _replace(path.with_suffix(".faiss"), lambda p: self._faiss.write_index(self._index, p))
        _replace(path.with_suffix(".npy"), lambda p: _save_array(p, self._label_of))
        _replace(path.with_suffix(".json"), lambda p: Path(p).write_text(json.dumps(meta)))

    @classmethod
    def load(cls, path: Path) -> tuple[QuantizedIndex, dict[str, Any]] | None:
        """The index saved at `path` and the identity it was saved with; None if absent."""
        faiss = faiss_module()
        try:
            meta = json.loads(path.with_suffix(".json").read_text())
            index = faiss.read_index(str(path.with_suffix(".faiss")))
            labels = np.load(path.with_suffix(".npy"))
        except (OSError, ValueError, RuntimeError):
            return None
        codes = {(coll, source_type): i for i, (coll, source_type) in enumerate(meta["labels"])}
        return cls(index, labels, codes), meta


def _replace(path: Path, write: Any) -> None:
    partial = path.with_name(path.name + ".partial")
    write(str(partial))
    os.replace(partial, path)


def _save_array(path: str, array: np.ndarray) -> None:
    with open(path, "wb") as file:  # a file object: np.save would append .npy to a name
        np.save(file, array)
