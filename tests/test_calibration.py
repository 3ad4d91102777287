"""Calibration arithmetic on sets small enough to check by hand."""

import pytest

from knowledge_api.calibration import (
    base_rate_fold_ece,
    ece,
    fit_platt,
    folds_of,
    level_precision,
    out_of_fold,
    reliability,
    sigmoid,
)

CONFIDENCES = [0.05, 0.15, 0.15, 0.95, 0.95, 0.95, 1.0]
RIGHT = [False, True, False, True, True, True, False]


def test_ece_by_hand() -> None:
    """Bin 0: 1 answer, conf 0.05, 0 right (gap 0.05). Bin 1: 2 answers, conf 0.15, half
    right (gap 0.35). Bin 9: 4 answers (1.0 falls in the last bin), conf 0.9625, 3 right
    (gap 0.2125). ECE = (1 x 0.05 + 2 x 0.35 + 4 x 0.2125) / 7 = 1.6 / 7."""
    assert ece(CONFIDENCES, RIGHT) == pytest.approx(1.6 / 7)
    table = reliability(CONFIDENCES, RIGHT)
    assert [b.count for b in table] == [1, 2, 0, 0, 0, 0, 0, 0, 0, 4]
    assert table[9].confidence == pytest.approx(0.9625) and table[9].accuracy == 0.75


def test_a_calibrated_set_has_no_error_and_an_empty_one_is_zero() -> None:
    assert ece([0.25] * 4, [True, False, False, False]) == pytest.approx(0.0)
    assert ece([], []) == 0.0


def test_level_precision() -> None:
    levels = ["high", "high", "low", "medium", "high"]
    right = [True, True, False, True, False]
    assert level_precision(levels, right) == {
        "high": (3, pytest.approx(2 / 3)),
        "low": (1, 0.0),
        "medium": (1, 1.0),
    }


def test_platt_fit_follows_the_data() -> None:
    """Right answers score high: the fitted slope is positive and a score's probability
    tracks the share of right answers around it."""
    scores = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0] * 3
    right = [s >= 0.5 for s in scores]
    right[0] = right[9] = False
    a, b = fit_platt(scores, right)
    assert b > 0
    assert sigmoid(a + b * 0.1) < 0.2 < 0.8 < sigmoid(a + b * 0.9)
    folds = out_of_fold(scores, right, folds=5).fold_ece()
    assert len(folds) == 5 and all(0 <= e <= 1 for e in folds)


def test_grouped_folds_keep_each_question_whole() -> None:
    groups = ["q1", "q1", "q2", "q3", "q3", "q3", "q4"]
    folds = folds_of(len(groups), 2, groups)
    assert [f.tolist() for f in folds] == [[0, 1, 3, 4, 5], [2, 6]]
    assert [f.tolist() for f in folds_of(5, 2)] == [[0, 2, 4], [1, 3]]


def test_the_split_alone_has_an_error_a_pooled_fit_does_not() -> None:
    """Two questions, one always right, one never: each fold's 'knows nothing' confidence
    is the other fold's share right, wrong by 1 on every item."""
    groups = ["a"] * 10 + ["b"] * 10
    right = [True] * 10 + [False] * 10
    assert base_rate_fold_ece(right, 2, groups) == [pytest.approx(1.0), pytest.approx(1.0)]


def test_pooled_out_of_fold_error_of_a_calibrated_score_is_small() -> None:
    """Scores 0.2 and 0.8, right 20 % and 80 % of the time, in 80 questions of 5: the
    out-of-fold mapping recovers them, though no fit saw the question it predicts."""
    scores = [0.2] * 200 + [0.8] * 200
    right = ([True] + [False] * 4) * 40 + ([True] * 4 + [False]) * 40
    groups = [i // 5 for i in range(400)]
    assert out_of_fold(scores, right, 5, groups=groups).pooled_ece() < 0.01
