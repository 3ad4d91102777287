"""`eval`: retrieval quality or answer calibration on a BEIR directory, or today's
ranking judged by readers' ratings."""

from __future__ import annotations

import argparse
import sys
from typing import Any, Protocol

from knowledge_api import validation
from knowledge_api.cli.running import print_json, with_service
from knowledge_api.errors import InvalidRequest
from knowledge_api.registry import import_extra
from knowledge_api.service import KnowledgeService
from knowledge_api.settings import Settings


def run_eval(settings: Settings, args: argparse.Namespace) -> int:
    from knowledge_api.usecases import answer_eval, evaluation

    if args.feedback or args.directory is None:
        return run_feedback_eval(settings, args)

    collection = args.collection and validation.collection_name(args.collection, "--collection")
    if args.plot and not args.answers:
        raise InvalidRequest("--plot", "needs --answers (it draws the answers' reliability)")
    if args.plot:
        import_extra("matplotlib", "plot")  # before the corpus is ingested, not after
    # the modes are measured without a reranker; only --reranker loads and runs one
    settings = settings.replace(reranker=args.reranker or "none")

    async def report(service: KnowledgeService) -> int:
        from tqdm import tqdm

        result: evaluation.EvalReport | answer_eval.CalibrationReport
        with tqdm(unit="doc", file=sys.stderr, disable=None) as bar:
            if args.answers:
                result = await answer_eval.evaluate_answers(
                    service, args.directory, collection=collection, progress=bar.update
                )
            else:
                result = await evaluation.evaluate(
                    service,
                    args.directory,
                    collection=collection,
                    progress=bar.update,
                    rerank=bool(args.reranker),
                )
        print_report(result, args.json)
        if args.plot and isinstance(result, answer_eval.CalibrationReport):
            answer_eval.plot(result, args.plot)
            print(f"reliability diagram: {args.plot}", file=sys.stderr)
        return 0

    return with_service(settings, report)


def run_feedback_eval(settings: Settings, args: argparse.Namespace) -> int:
    """`eval --feedback`: the rated answers as a judged set, scored with today's ranking
    (KNOWLEDGE_RERANKER included: it is part of today's ranking)."""
    from knowledge_api.ledger import moment
    from knowledge_api.usecases import feedback

    if not args.feedback:
        raise InvalidRequest("DIR", "is required (a BEIR directory), or pass --feedback")
    if args.directory is not None or args.answers:
        raise InvalidRequest("--feedback", "takes no DIR and no --answers")
    since = moment("--since")(args.since)

    async def report(service: KnowledgeService) -> int:
        judged = await feedback.judged_set(service, since)
        result = await feedback.evaluate(service, judged)
        print_report(result, args.json)
        return 0

    return with_service(settings, report)


class Report(Protocol):
    """What each evaluation returns: a JSON document and a table to read."""

    def as_json(self) -> dict[str, Any]: ...

    def table(self) -> str: ...


def print_report(report: Report, as_json: bool) -> None:
    if as_json:
        print_json(report.as_json())
    else:
        print(report.table())
