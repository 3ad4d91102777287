import random
from collections.abc import Hashable

from pytest import approx

from knowledge_api import text
from knowledge_api.models import SETTINGS_RANKING, Ranking
from knowledge_api.stores.fusion import (
    DEFAULT_TUNING,
    IDENTIFIER_VECTOR_WEIGHT,
    Candidate,
    convex_fusion,
    cosine_to_similarity,
    reciprocal_rank_fusion,
    relative_scores,
    similar_candidates,
    similarities_of,
)

WEIGHTS = [0.0, 0.1, 0.3, 0.5, 0.7, 0.8, 0.9, 1.0]


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


# -- convex fusion: a weak list must not pull the good one down ---------------------


def ranked(
    by_vector: list[Candidate],
    by_keyword: list[Candidate],
    cosines: dict[Hashable, float],
    weight: float = DEFAULT_TUNING.vector_weight,
) -> list[Hashable]:
    return [key for key, _ in convex_fusion(by_vector, by_keyword, cosines, weight)]


def test_garbage_keyword_list_leaves_the_vector_top_k() -> None:
    # good: cosines 0.80 down to 0.53; garbage: strong BM25 on passages far from the query
    good = [Candidate(f"v{i}", 0.80 - 0.03 * i) for i in range(10)]
    garbage = [Candidate(f"k{i}", 30.0 - i) for i in range(10)]
    cosines = {c.key: c.score for c in good} | {c.key: 0.05 for c in garbage}
    assert ranked(good, garbage, cosines)[:10] == [c.key for c in good]


def test_garbage_vector_list_leaves_the_keyword_top_k() -> None:
    # a query vector that says little: every cosine low and close together, its best
    # hits in an order of their own; the keyword list has clear gaps
    rng = random.Random(3)
    vague = [Candidate(f"v{i}", 0.12 - 0.002 * i) for i in range(10)]
    good = [Candidate(f"k{i}", 20.0 - 2 * i) for i in range(10)]
    cosines = {c.key: c.score for c in vague} | {c.key: rng.uniform(0.09, 0.11) for c in good}
    fused = ranked(vague, good, cosines)[:10]
    assert fused[:5] == [c.key for c in good[:5]]
    assert len(set(fused) & {c.key for c in good}) >= 8  # within a tolerance of 2 of 10


def test_the_weight_moves_the_ranking_monotonically() -> None:
    by_vector = [Candidate("a", 0.7), Candidate("b", 0.5), Candidate("c", 0.3)]
    by_keyword = [Candidate("c", 9.0), Candidate("b", 6.0), Candidate("d", 3.0)]
    cosines = {"a": 0.7, "b": 0.5, "c": 0.3, "d": 0.2}
    rank_of_a = [ranked(by_vector, by_keyword, cosines, w).index("a") for w in WEIGHTS]
    rank_of_c = [ranked(by_vector, by_keyword, cosines, w).index("c") for w in WEIGHTS]
    assert rank_of_a == sorted(rank_of_a, reverse=True)  # a (vector's best) only rises
    assert rank_of_c == sorted(rank_of_c)  # c (keyword's best) only falls
    assert ranked(by_vector, by_keyword, cosines, 1.0) == ["a", "b", "c", "d"]  # the cosine
    assert ranked(by_vector, by_keyword, cosines, 0.0)[:3] == ["c", "b", "d"]  # the keywords


def test_keyword_scale_does_not_matter_and_ties_keep_the_vector_order() -> None:
    by_vector = [Candidate("a", 0.6), Candidate("b", 0.6)]
    by_keyword = [Candidate("b", 4.0), Candidate("a", 4.0), Candidate("c", 1.0)]
    cosines = {"a": 0.6, "b": 0.6, "c": 0.1}
    scaled = [Candidate(c.key, 1000 * c.score) for c in by_keyword]
    assert ranked(by_vector, by_keyword, cosines) == ranked(by_vector, scaled, cosines)
    assert ranked(by_vector, by_keyword, cosines) == ["a", "b", "c"]


def test_relative_scores_are_zero_to_one() -> None:
    scores = relative_scores([Candidate("a", 8.0), Candidate("b", 2.0), Candidate("c", -1.0)])
    assert scores == {"a": 1.0, "b": 0.25, "c": 0.0}
    assert relative_scores([Candidate("a", 0.0)]) == {"a": 0.0}


# -- a query naming something by a code-shaped word --------------------------------


def test_identifiers_are_words_shaped_like_code_and_prose_holds_none() -> None:
    asked = "Does POST /v1/knowledge/documents with source_type, KNOWLEDGE_API_HOST or $HOME"
    assert text.identifiers(asked) == [
        "/v1/knowledge/documents",
        "source_type",
        "KNOWLEDGE_API_HOST",
        "$HOME",
    ]
    assert text.identifiers("see docs/api.md, knowledge_api.client or settings.py") == [
        "docs/api.md",
        "knowledge_api.client",
        "settings.py",
    ]
    prose = "What is 3.14, e.g. in the U.S., up/down and/or 24/7 on 10/12/2024 at 5 p.m.?"
    assert text.identifiers(prose) == []
    assert text.identifiers("how many people live in paris") == []


def test_an_identifier_in_the_query_evens_the_shares_unless_the_request_chose() -> None:
    """The passage holding the name, best by keywords but of middling cosine, ranks
    first for the query that names it; a prose query keeps the setting's share."""
    named, near = "names it", "near in meaning"
    by_vector = [Candidate(near, 0.56), Candidate(named, 0.30)]
    by_keyword = [Candidate(named, 9.0), Candidate(near, 5.0)]
    cosines = {near: 0.56, named: 0.30}

    def first(query: str, ranking: Ranking = SETTINGS_RANKING) -> Hashable:
        weight = DEFAULT_TUNING.adjusted(ranking, query).vector_weight
        return convex_fusion(by_vector, by_keyword, cosines, weight)[0][0]

    assert DEFAULT_TUNING.vector_weight > IDENTIFIER_VECTOR_WEIGHT
    assert first("What happens when I post the same source_type again?") == named
    assert first("What happens when I post the same source type again?") == near
    assert DEFAULT_TUNING.adjusted(SETTINGS_RANKING, "a /readyz").vector_weight == approx(0.5)
    chosen = Ranking(vector_weight=0.9)
    assert DEFAULT_TUNING.adjusted(chosen, "source_type").vector_weight == approx(0.9)
    assert first("the source_type", chosen) == near


def test_cosines_are_clipped_to_similarities_alike_one_by_one_and_in_lists() -> None:
    cosines = [1.5, 1.0, 0.73, 0.0, -0.0, -0.2, float("nan")]
    found = [(f"k{i}", c) for i, c in enumerate(cosines)]
    one_by_one = [cosine_to_similarity(c) for c in cosines]
    assert repr(one_by_one) == repr([1.0, 1.0, 0.73, 0.0, -0.0, 0.0, float("nan")])
    listed = similar_candidates(found)
    assert [c.key for c in listed] == [key for key, _ in found]  # order kept
    by_key = similarities_of(found)
    for got in ([c.score for c in listed], [by_key[key] for key, _ in found]):
        assert repr(got) == repr(one_by_one)  # to the bit (and the sign of zero)
