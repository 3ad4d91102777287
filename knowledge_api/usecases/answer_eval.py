"""Calibration of grounded answers on a BEIR directory (`knowledge-api eval --answers`):
every judged query is answered as POST /v1/knowledge/answer would answer it, and the
answer's `confidence.overall` is compared with whether it is right.

An answer is right when the first passage it cites (the lowest [n]) answers the question:
grade >= 2 in the qrels (MS MARCO's graded judgements: 1 is "related", on topic without
answering; 2 "highly relevant" and 3 "perfectly relevant" answer it). An unjudged passage
counts as not relevant. Answers of status
`insufficient_context` make no claim and are counted apart.

One answer per question leaves a few dozen samples, too few to tell a calibration error
from the luck of which questions fell in a fold. So every passage retrieved for a
question is also answered alone, as if retrieval had found only it: the same synthesizer
and the same confidence, right when that passage answers the question. That gives up to
`limit` samples per question, each a citation and the confidence it earns. Folds keep
all the samples of a question together, so a mapping is never tested on a question it
was fitted on.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from knowledge_api import calibration, grounding
from knowledge_api.models import Progress, SearchHit
from knowledge_api.registry import import_extra
from knowledge_api.service import KnowledgeService
from knowledge_api.usecases import answers
from knowledge_api.usecases.evaluation import ingested, load_beir

RELEVANT = 2
"""The lowest grade of a passage that answers the question."""
FOLDS = 5


@dataclass(frozen=True, slots=True)
class Judged:
    query: str
    status: str
    confidence: grounding.Confidence
    """The answer's, as POST /v1/knowledge/answer reports it."""
    grade: int
    """Relevance of the first cited passage (0 when none is cited or it is unjudged)."""
    top_grade: int
    """Relevance of the best-ranked passage found, cited or not."""
    qid: str = ""

    @property
    def right(self) -> bool:
        return self.grade >= RELEVANT


@dataclass(frozen=True)
class Samples:
    """Answers judged right or wrong, and how well their confidence predicts it."""

    judged: list[Judged]

    @property
    def answered(self) -> list[Judged]:
        return [j for j in self.judged if j.status == "success"]

    def _right(self) -> list[bool]:
        return [j.right for j in self.answered]

    def _confidences(self) -> list[grounding.Confidence]:
        return [j.confidence for j in self.answered]

    def _groups(self) -> list[str]:
        """Each answer's question: a fold keeps a question's answers together."""
        return [j.qid for j in self.answered]

    def ece(self) -> float:
        return calibration.ece([c.overall for c in self._confidences()], self._right())

    @cached_property
    def out_of_fold(self) -> calibration.OutOfFold | None:
        """Platt mappings refit on the other folds (questions kept together); None with
        fewer answers than two per fold."""
        if len(self.answered) < 2 * FOLDS:
            return None
        raw = [c.raw for c in self._confidences()]
        return calibration.out_of_fold(raw, self._right(), FOLDS, self._groups())

    def fold_ece(self) -> list[float]:
        """ECE on each fold of a mapping refit on the other folds."""
        return self.out_of_fold.fold_ece() if self.out_of_fold else []

    def base_rate_fold_ece(self) -> list[float]:
        return calibration.base_rate_fold_ece(self._right(), FOLDS, self._groups())

    def pooled_ece(self) -> float | None:
        """ECE of every answer's out-of-fold probability, all answers binned together."""
        return self.out_of_fold.pooled_ece() if self.out_of_fold else None

    def platt(self) -> tuple[float, float] | None:
        if len(self.answered) < 2:
            return None
        return calibration.fit_platt([c.raw for c in self._confidences()], self._right())

    def bins(self) -> list[calibration.Bin]:
        return calibration.reliability([c.overall for c in self._confidences()], self._right())

    def levels(self) -> dict[str, tuple[int, float]]:
        return calibration.level_precision([c.level for c in self._confidences()], self._right())

    def as_json(self) -> dict[str, Any]:
        refit = self.platt()
        return {
            "answered": len(self.answered),
            "insufficient_context": len(self.judged) - len(self.answered),
            "accuracy": accuracy(self.answered),
            "ece": self.ece(),
            "fold_ece": self.fold_ece(),
            "pooled_fold_ece": self.pooled_ece(),
            "base_rate_fold_ece": self.base_rate_fold_ece() if self.fold_ece() else [],
            "platt_refit": list(refit) if refit else None,
            "levels": {
                level: {"answers": n, "precision": p} for level, (n, p) in self.levels().items()
            },
            "bins": [asdict(b) for b in self.bins()],
        }

    def lines(self, indent: str = "") -> list[str]:
        lines = [f"{'confidence':<11} {'answers':>7} {'mean conf':>9} {'right':>6} {'gap':>6}"]
        for b in self.bins():
            if b.count:
                lines.append(
                    f"{b.low:.1f}-{b.high:.1f}    {b.count:>7} {b.confidence:>9.3f} "
                    f"{b.accuracy:>6.3f} {abs(b.accuracy - b.confidence):>6.3f}"
                )
        lines.append(f"ECE (10 bins, shipped mapping, in sample): {self.ece():.3f}")
        if folds := self.fold_ece():
            shown = " ".join(f"{e:.3f}" for e in folds)
            mean = sum(folds) / len(folds)
            lines.append(
                f"ECE of a mapping refit on the other folds, per fold: {shown} (mean {mean:.3f}); "
                f"all folds pooled: {self.pooled_ece():.3f}"
            )
            floor = self.base_rate_fold_ece()
            lines.append(
                "  the same folds, every answer given the other folds' share right: mean "
                f"{sum(floor) / len(floor):.3f} (the error the split alone causes)"
            )
        if refit := self.platt():
            lines.append(f"Platt refit on all of them: a={refit[0]:.3f} b={refit[1]:.3f}")
        for level in ("high", "medium", "low"):
            count, precision = self.levels().get(level, (0, 0.0))
            lines.append(f"level {level:<6}: {count:>4} answers, {precision:.1%} right")
        return [indent + line for line in lines]


@dataclass(frozen=True)
class CalibrationReport(Samples):
    documents: int = 0
    collection: str = ""
    passages: Samples | None = None
    """Every retrieved passage answered alone: the larger sample."""

    def as_json(self) -> dict[str, Any]:
        return {
            "queries": len(self.judged),
            **super().as_json(),
            "calibration": list(grounding.CALIBRATION),
            "passages": self.passages.as_json() if self.passages else None,
            "documents": self.documents,
            "collection": self.collection,
        }

    def table(self) -> str:
        answered, refused = self.answered, [j for j in self.judged if j.status != "success"]
        missed = sum(j.top_grade >= RELEVANT for j in refused)
        lines = [
            f"{len(self.judged)} judged queries over {self.documents} documents: "
            f"{len(answered)} answered ({accuracy(answered):.1%} right: first cited passage "
            f"answers it), {len(refused)} insufficient_context ({missed} of them had an "
            "answering best passage)",
            *self.lines(),
            f"shipped mapping: a={grounding.CALIBRATION[0]:.3f} b={grounding.CALIBRATION[1]:.3f}",
        ]
        if self.passages and self.passages.judged:
            alone = self.passages
            lines += [
                "",
                f"every retrieved passage answered alone: {len(alone.judged)} passages, "
                f"{len(alone.answered)} answered ({accuracy(alone.answered):.1%} right: the "
                f"passage answers the question), "
                f"{len(alone.judged) - len(alone.answered)} insufficient_context",
                *alone.lines("  "),
            ]
        return "\n".join(lines)


def accuracy(judged: list[Judged]) -> float:
    return sum(j.right for j in judged) / len(judged) if judged else 0.0


async def evaluate_answers(
    service: KnowledgeService,
    folder: Path,
    collection: str = "",
    progress: Progress | None = None,
    limit: int = 5,
    each_passage: bool = True,
) -> CalibrationReport:
    """Answer every judged query of `folder` at the service's default answer threshold;
    with `each_passage`, answer it again from each retrieved passage alone."""
    data = load_beir(folder)
    judged: list[Judged] = []
    alone: list[Judged] = []
    async with ingested(service, data, collection, progress) as corpus:
        for qid, text in data.judged:
            params = answers.AnswerParams(
                query=text,
                threshold=service.answer_threshold,
                limit=limit,
                collection=corpus.name,
            )
            grounded, _ = await answers.compute(service, params)
            qrels = data.qrels[qid]
            judged.append(sample(qid, text, grounded, qrels))
            for hit in grounded.results if each_passage else ():
                single = await answer_from(service, params, hit)
                alone.append(sample(qid, text, single, qrels))
    return CalibrationReport(judged, corpus.documents, corpus.name, Samples(alone))


async def answer_from(
    service: KnowledgeService, params: answers.AnswerParams, hit: SearchHit
) -> answers.GroundedAnswer:
    """The answer, and its confidence, had retrieval found only `hit`."""
    outcome = await service.synthesize(params.query, [hit])
    grounded = await answers.ground(service, params, outcome, 0.0, ())
    return replace(grounded, results=(hit,))


def sample(qid: str, query: str, grounded: answers.GroundedAnswer, qrels: dict[str, int]) -> Judged:
    first = grounded.sources[0][1].source_id if grounded.sources else None
    top = grounded.results[0].source_id if grounded.results else None
    return Judged(
        query=query,
        status=grounded.status,
        confidence=grounded.confidence,
        grade=qrels.get(first, 0) if first else 0,
        top_grade=qrels.get(top, 0) if top else 0,
        qid=qid,
    )


def plot(report: CalibrationReport, path: Path) -> None:
    """A reliability diagram: share right per confidence bin against the diagonal."""
    import_extra("matplotlib", "plot").use("Agg")
    pyplot = import_extra("matplotlib.pyplot", "plot")
    bins = [b for b in report.bins() if b.count]
    figure, axes = pyplot.subplots(figsize=(5, 5))
    axes.plot([0, 1], [0, 1], linestyle="--", color="grey", label="perfect calibration")
    axes.bar(
        [(b.low + b.high) / 2 for b in bins],
        [b.accuracy for b in bins],
        width=0.1,
        edgecolor="black",
        alpha=0.7,
        label="share right",
    )
    for b in bins:
        axes.annotate(str(b.count), ((b.low + b.high) / 2, b.accuracy), ha="center", va="bottom")
    axes.set(
        xlim=(0, 1),
        ylim=(0, 1.05),
        xlabel="confidence.overall",
        ylabel="share whose first cited passage answers (grade >= 2)",
        title=f"Reliability, ECE {report.ece():.3f} ({len(report.answered)} answers)",
    )
    axes.legend(loc="upper left")
    figure.tight_layout()
    figure.savefig(path)
    pyplot.close(figure)
