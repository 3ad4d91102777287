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


def folds_of(count: int, folds: int) -> list[np.ndarray]:
    """Interleaved folds (item i goes to fold i mod k): deterministic, no shuffling."""
    return [np.arange(start, count, folds) for start in range(folds)]


def cross_validated_ece(
    scores: Sequence[float], right: Sequence[bool], folds: int = 5, bins: int = BINS
) -> list[float]:
    """The ECE on each fold of a Platt fit on the other folds."""
    x, y = np.asarray(scores, dtype=float), np.asarray(right, dtype=bool)
    errors = []
    for held in folds_of(len(x), folds):
        if len(held) == 0:
            continue
        train = np.setdiff1d(np.arange(len(x)), held)
        a, b = fit_platt(x[train], y[train])
        predicted = [sigmoid(a + b * value) for value in x[held]]
        errors.append(ece(predicted, y[held], bins))
    return errors
