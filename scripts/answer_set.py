"""Offline answers on a question set: how often the answer contains the sentence that
answers the question, and how often POST /v1/knowledge/answer refuses a question whose
answering passage was found.

Ingests the bundled docs (knowledge_api/docs, the default collection) and the product
notes of tests/product_notes (collection `notes`) with the local model into a SQLite
store, then answers every question of tests/answers.json as the route answers it (the
extractive synthesizer, the default answer threshold, 5 passages) and reports:

- contains: the share of answerable questions whose answer holds the answering sentence,
  or another sentence of the docs that states the same fact (`also`), compared without
  Markdown emphasis, list markers, case or runs of whitespace (a sentence longer than an
  answer quotes of it, by its first 120 characters);
- retrieved: how many answerable questions have a passage holding such a sentence among
  the first 5 a search finds (threshold 0);
- refused when retrieved: the share of those that /answer answers insufficient_context;
- refused, no answer there: the share of questions with no answering sentence (about an
  entity the notes do not cover) that are refused, as they should be;
- citations with support: of every citation marker of the answers given, the share whose
  words were found in the passage it cites (a quote, not `unsupported`).

The set is split as tests/answers.json says: every third question and those marked
`added_after_tuning` were kept out of every tuning decision. Both are reported, unless
`--tuned-only` is given: then the held-out questions are not scored at all and nothing of
them is printed (no row, no count, no miss), so a tuning run cannot see them.

    .venv/bin/python scripts/answer_set.py [--file tests/answers.json] [--work DIR] [--misses]
        [--tuned-only]

`--work DIR` keeps the store in DIR, so a second run does not ingest again.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from knowledge_api.compose import build_service
from knowledge_api.ingest.loaders import LoadOptions, load_paths
from knowledge_api.models import DEFAULT_COLLECTION
from knowledge_api.service import KnowledgeService
from knowledge_api.settings import Settings
from knowledge_api.usecases import answers

HERE = Path(__file__).resolve().parent.parent
DEFAULT_FILE = HERE / "tests" / "answers.json"
NOTES = HERE / "tests" / "product_notes"
COLLECTIONS = {"docs": DEFAULT_COLLECTION, "notes": "notes"}
PREFIX = 120
"""Characters of a long answering sentence an answer must hold (it may be shortened)."""
LIMIT = 5

_MARKUP = re.compile(r"\*\*|__|^\s*(?:[-*+]|\d+\.)\s+", re.MULTILINE)
_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")


@dataclass(frozen=True, slots=True)
class Question:
    ask: str
    corpus: str
    doc: str
    sentence: str | None
    tuned: bool
    also: tuple[str, ...] = ()
    """Other sentences of the docs that state the same fact."""

    @property
    def answering(self) -> tuple[str, ...]:
        return (self.sentence, *self.also) if self.sentence else ()


@dataclass(frozen=True, slots=True)
class Scored:
    question: Question
    status: str
    answer: str
    retrieved: bool
    """A passage holding the answering sentence is among the first 5 found."""
    citations: int = 0
    """Citation markers of the answer."""
    supported: int = 0
    """Those whose words were found in the passage they cite."""

    @property
    def contains(self) -> bool:
        answer = normalised(self.answer)
        return any(normalised(s)[:PREFIX] in answer for s in self.question.answering)

    @property
    def refused(self) -> bool:
        return self.status == "insufficient_context"


def normalised(text: str) -> str:
    return " ".join(_MARKUP.sub("", _LINK.sub(r"\1", text)).split()).casefold()


def questions(path: Path) -> list[Question]:
    found = []
    for number, each in enumerate(json.loads(path.read_text())["questions"], start=1):
        held_out = number % 3 == 0 or each.get("added_after_tuning", False)
        found.append(
            Question(
                each["ask"],
                each["corpus"],
                each["doc"],
                each["sentence"],
                not held_out,
                tuple(each.get("also", ())),
            )
        )
    return found


async def filled(service: KnowledgeService) -> None:
    """The docs and the notes indexed, unless the store already holds them."""
    if (await service.collections()).get(COLLECTIONS["notes"]):
        return
    for corpus, folder in (("docs", service.seed_path()), ("notes", NOTES)):
        options = LoadOptions(collection=COLLECTIONS[corpus])
        await service.ingest(load_paths([folder], options).documents)


async def score(service: KnowledgeService, question: Question) -> Scored:
    params = answers.AnswerParams(
        query=question.ask,
        threshold=service.answer_threshold,
        limit=LIMIT,
        collection=COLLECTIONS[question.corpus],
    )
    found = await answers.search(service, params, 0.0)
    wanted = [normalised(s)[:PREFIX] for s in question.answering]
    retrieved = any(
        w in normalised(hit.chunk.content) for hit in found.hits[:LIMIT] for w in wanted
    )
    grounded, _ = await answers.compute(service, params)
    cited = grounded.outcome.evidence if grounded.answer and grounded.outcome else ()
    supported = sum(found.supported for found in cited)
    return Scored(
        question, grounded.status, grounded.answer or "", retrieved, len(cited), supported
    )


def row(label: str, scored: list[Scored]) -> str:
    answerable = [s for s in scored if s.question.sentence]
    retrieved = [s for s in answerable if s.retrieved]
    unanswerable = [s for s in scored if not s.question.sentence]
    return (
        f"{label:<10}{len(answerable):>5}{share(answerable, lambda s: s.contains):>10}"
        f"{len(retrieved):>11}{share(retrieved, lambda s: s.refused):>12}"
        f"{len(unanswerable):>8}{share(unanswerable, lambda s: s.refused):>10}"
    )


def share(scored: list[Scored], test: Callable[[Scored], bool]) -> str:
    if not scored:
        return "-"
    return f"{100 * sum(map(test, scored)) / len(scored):.1f}%"


def report(scored: list[Scored], misses: bool, tuned_only: bool = False) -> None:
    """The summary rows, then the misses; with `tuned_only` only the tuned questions'."""
    print(
        f"{'':<10}{'n':>5}{'contains':>10}{'retrieved':>11}{'refused':>12}{'no ans.':>8}"
        f"{'refused':>10}"
    )
    if tuned_only:
        scored = [s for s in scored if s.question.tuned]
    print(row("tuned", [s for s in scored if s.question.tuned]))
    if not tuned_only:
        print(row("held out", [s for s in scored if not s.question.tuned]))
        print(row("all", scored))
    too_long = [
        s
        for s in scored
        if len(re.findall(r"\[\d+\]", s.answer)) > 3
        or any(len(part.strip()) > 321 for part in re.split(r"\[\d+\]", s.answer))
    ]
    print(f"answers over 3 sentences or 320 characters a sentence: {len(too_long)}")
    cited = sum(s.citations for s in scored)
    supported = sum(s.supported for s in scored)
    if cited:
        print(f"citations with support: {supported} of {cited} ({100 * supported / cited:.1f}%)")
    if misses:
        for s in scored:
            wrong = (s.question.sentence and not s.contains) or (
                not s.question.sentence and not s.refused
            )
            if wrong:
                where = "tuned" if s.question.tuned else "held out"
                print(f"\n[{where}] {s.question.ask} ({s.status}, retrieved={s.retrieved})")
                print(f"  wanted:   {s.question.sentence}")
                print(f"  answered: {s.answer}")


async def run(path: Path, work: Path, misses: bool, tuned_only: bool = False) -> None:
    settings = Settings.from_env(environ={}, env_file=None).replace(
        db_path=work / "answers.db", seed_on_empty=False, synthesizer="extractive"
    )
    service = build_service(settings)
    await service.start()
    try:
        await filled(service)
        asked = [q for q in questions(path) if q.tuned or not tuned_only]
        scored = [await score(service, q) for q in asked]
    finally:
        await service.stop()
    report(scored, misses, tuned_only)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--file", type=Path, default=DEFAULT_FILE)
    parser.add_argument("--work", type=Path, help="keep the store here (default: a temporary one)")
    parser.add_argument("--misses", action="store_true", help="list the questions answered wrong")
    parser.add_argument(
        "--tuned-only",
        action="store_true",
        help="score and print only the tuned questions (nothing about the held-out ones)",
    )
    args: Any = parser.parse_args(argv)
    if args.work:
        args.work.mkdir(parents=True, exist_ok=True)
        asyncio.run(run(args.file, args.work, args.misses, args.tuned_only))
        return
    with tempfile.TemporaryDirectory() as folder:
        asyncio.run(run(args.file, Path(folder), args.misses, args.tuned_only))


if __name__ == "__main__":
    main()
