"""How well a confidence predicts being right: expected calibration error over equal-width
bins, the reliability table behind it, the precision of each confidence level, and the
Platt (logistic) fit that maps a raw score to a probability, with the cross-validated
error a fit reaches on answers it was not fitted on."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

BINS = 10


@dataclass(frozen=True, slots=True)
class Bin:
    low: float
    high: float
    count: int
    confidence: float
    """Mean confidence of the answers in the bin (0 when empty)."""
    accuracy: float
    """Share of them that were right (0 when empty)."""


def reliability(confidences: Sequence[float], right: Sequence[bool], bins: int = BINS) -> list[Bin]:
    """Equal-width bins over [0, 1]; a confidence of exactly 1 falls in the last one."""
    p, y = np.asarray(confidences, dtype=float), np.asarray(right, dtype=float)
    index = np.minimum((p * bins).astype(int), bins - 1)
    table = []
    for b in range(bins):
        inside = index == b
        count = int(inside.sum())
        mean_p = float(p[inside].mean()) if count else 0.0
        mean_y = float(y[inside].mean()) if count else 0.0
        table.append(Bin(b / bins, (b + 1) / bins, count, mean_p, mean_y))
    return table


def ece(confidences: Sequence[float], right: Sequence[bool], bins: int = BINS) -> float:
    """Sum over bins of |accuracy - mean confidence| weighted by the bin's share."""
    total = len(confidences)
    if total == 0:
        return 0.0
    return sum(
        b.count / total * abs(b.accuracy - b.confidence)
        for b in reliability(confidences, right, bins)
    )


def level_precision(levels: Sequence[str], right: Sequence[bool]) -> dict[str, tuple[int, float]]:
    """Per level: (answers, share of them right)."""
    found: dict[str, list[bool]] = {}
    for level, ok in zip(levels, right, strict=True):
        found.setdefault(level, []).append(ok)
    return {level: (len(oks), sum(oks) / len(oks)) for level, oks in found.items()}


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def fit_platt(
    scores: Sequence[float], right: Sequence[bool], l2: float = 1e-3
) -> tuple[float, float]:
    """(a, b) of p = sigmoid(a + b x) maximising the likelihood (Newton's method),
    with Platt's smoothed targets so a separable set does not run off to infinity."""
    x, y = np.asarray(scores, dtype=float), np.asarray(right, dtype=float)
    positives, negatives = y.sum(), len(y) - y.sum()
    target = np.where(y > 0, (positives + 1) / (positives + 2), 1 / (negatives + 2))
    design = np.column_stack([np.ones_like(x), x])
    weights = np.zeros(2)
    for _ in range(100):
        p = 1 / (1 + np.exp(-(design @ weights)))
        gradient = design.T @ (p - target) + l2 * weights
        hessian = design.T @ (design * (p * (1 - p))[:, None]) + l2 * np.eye(2)
        step = np.linalg.solve(hessian, gradient)
        weights -= step
        if np.abs(step).max() < 1e-9:
            break
    return float(weights[0]), float(weights[1])


def folds_of(count: int, folds: int, groups: Sequence[object] | None = None) -> list[np.ndarray]:
    """Interleaved folds, deterministic, no shuffling: item i goes to fold i mod k, or,
    with `groups`, the i-th distinct group (in order of first appearance) goes to fold
    i mod k with all its items, so that what is learnt from one question is never
    tested on the same question."""
    if groups is None:
        return [np.arange(start, count, folds) for start in range(folds)]
    order = {group: i for i, group in enumerate(dict.fromkeys(groups))}
    fold = np.array([order[group] % folds for group in groups])
    return [np.flatnonzero(fold == start) for start in range(folds)]


@dataclass(frozen=True, slots=True)
class OutOfFold:
    """Each item's probability by a Platt fit on the folds it is not in: the error a
    mapping reaches on items it was not fitted on, read per fold or pooled."""

    right: np.ndarray
    folds: list[tuple[np.ndarray, np.ndarray]]
    """Per fold: (its items, their probabilities)."""

    def fold_ece(self, bins: int = BINS) -> list[float]:
        """The ECE on each fold. With a few dozen items a fold's error is mostly the
        chance of which items fell in it: see pooled_ece."""
        return [ece(p.tolist(), self.right[held].tolist(), bins) for held, p in self.folds]

    def pooled_ece(self, bins: int = BINS) -> float:
        """The ECE of every item's probability taken together: each one comes from a fit
        that never saw it (nor, with groups, its group), and the bins hold all the items
        instead of a fifth of them."""
        predicted = np.zeros(len(self.right))
        for held, p in self.folds:
            predicted[held] = p
        return ece(predicted.tolist(), self.right.tolist(), bins)


def out_of_fold(
    scores: Sequence[float],
    right: Sequence[bool],
    folds: int = 5,
    groups: Sequence[object] | None = None,
) -> OutOfFold:
    """A Platt fit per fold on the other folds, and its probabilities of the fold's items."""
    x, y = np.asarray(scores, dtype=float), np.asarray(right, dtype=bool)
    predicted = []
    for held in folds_of(len(x), folds, groups):
        if len(held) == 0:
            continue
        train = np.setdiff1d(np.arange(len(x)), held)
        a, b = fit_platt(x[train], y[train])
        predicted.append((held, 1 / (1 + np.exp(-(a + b * x[held])))))
    return OutOfFold(y, predicted)


def base_rate_fold_ece(
    right: Sequence[bool], folds: int = 5, groups: Sequence[object] | None = None
) -> list[float]:
    """The per-fold ECE of a confidence that knows nothing: every item of a fold gets the
    share right of the other folds. What a fold's error owes to the luck of the split."""
    y = np.asarray(right, dtype=bool)
    errors = []
    for held in folds_of(len(y), folds, groups):
        if len(held) == 0:
            continue
        rate = float(np.delete(y, held).mean()) if len(held) < len(y) else 0.0
        errors.append(ece([rate] * len(held), y[held].tolist()))
    return errors
