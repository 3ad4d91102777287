from pytest import approx

from knowledge_api.stores.fusion import reciprocal_rank_fusion


def test_rrf_matches_hand_computed_scores() -> None:
    fused = dict(reciprocal_rank_fusion([["a", "b", "c"], ["c", "a"]], k=60))
    assert fused["a"] == approx(1 / 61 + 1 / 62)
    assert fused["b"] == approx(1 / 62)
    assert fused["c"] == approx(1 / 63 + 1 / 61)


def test_rrf_orders_best_first_and_respects_weights() -> None:
    assert [k for k, _ in reciprocal_rank_fusion([["a", "b"], ["b", "c"]], k=1)] == ["b", "a", "c"]
    weighted = reciprocal_rank_fusion([["a"], ["b"]], k=60, weights=[1.0, 2.0])
    assert [k for k, _ in weighted] == ["b", "a"]


def test_rrf_of_nothing_is_empty() -> None:
    assert reciprocal_rank_fusion([[], []]) == []
