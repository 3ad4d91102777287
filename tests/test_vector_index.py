import numpy as np
import pytest

from knowledge_api.stores.sqlite.vector_index import VectorIndex


def unit(*values: float) -> np.ndarray:
    v = np.array(values, dtype=np.float32)
    return v / np.linalg.norm(v)


def test_search_is_exact_and_filtered_by_label_and_keys() -> None:
    index = VectorIndex(2, capacity=1)
    index.add(
        [1, 2, 3],
        np.stack([unit(1, 0), unit(1, 1), unit(0, 1)]),
        [("c", "wiki"), ("c", "jira"), ("other", "wiki")],
    )
    everything = index.mask("c", None, None)
    hits = index.search(unit(1, 0), 5, everything)
    assert [k for k, _ in hits] == [1, 2]
    assert hits[0][1] == np.float32(1.0)
    assert [k for k, _ in index.search(unit(1, 0), 5, index.mask("c", ["jira"], None))] == [2]
    only_2 = np.array([False, False, True, False])  # a mask over row ids
    assert [k for k, _ in index.search(unit(1, 0), 5, index.mask("c", None, only_2))] == [2]
    short = np.array([False, True])  # row ids past its end are not allowed
    assert [k for k, _ in index.search(unit(1, 0), 5, index.mask("c", None, short))] == [1]
    assert index.search(unit(1, 0), 5, index.mask("c", ["email"], None)) == []


def test_remove_and_replace_keep_rows_consistent() -> None:
    index = VectorIndex(2)
    index.add([1, 2, 3], np.stack([unit(1, 0), unit(0, 1), unit(1, 1)]), [("c", "wiki")] * 3)
    index.remove([1, 99])
    assert len(index) == 2
    index.add([3], np.stack([unit(-1, 0)]), [("c", "wiki")])
    assert len(index) == 2
    assert index.similarities([2, 3, 1], unit(1, 0)) == {2: 0.0, 3: -1.0}


def test_keys_vectors_and_labels_of_different_lengths_are_refused() -> None:
    index = VectorIndex(2)
    with pytest.raises(ValueError, match="differ in length"):
        index.add([4, 5], np.stack([unit(1, 0)]), [("c", "wiki")] * 2)
    assert len(index) == 0
