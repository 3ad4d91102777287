"""Follow-up questions in conversations: recall@5 of the passage that answers each one.

Ingests the bundled docs (knowledge_api/docs) with the local model into a temporary
SQLite store, then replays the conversations of tests/conversations.json. Every
follow-up is searched five ways, and recall@5 says how often the passage (document and
section) that answers it is among the first five results:

- as is:    the follow-up alone;
- joined:   the follow-up after the user's previous message when it is short (fewer than
            8 words), as the chat routes searched before the rewrite;
- by hand:  the standalone question written by hand (the ceiling);
- offline:  the service's offline rewrite (conversation.offline);
- LLM:      the service's rewrite through the Gemini link, its HTTP answered by respx
            with the hand-written question (a link that rewrites well): the LLM path's
            plumbing, without a provider's own quality.

Each earlier turn is answered as the chat routes answer it, with its source listed
under it ("Sources: [1] Title > Section"), so the rewrite can read what was cited.
The set is split: the odd-numbered conversations of the first 49 were used to tune the
offline rewrite; the even-numbered ones and those marked `added_after_tuning` (written
once it was tuned, to ask what the first set asks too little: follow-ups whose own words
fit many documents, "which errors does it raise?"; then "and X?" after a question that
kept its subject and moved its focus; then "and X?" / "what about X?" putting another
connector, endpoint or client in the entity's place) were not. Both are reported, and the held-out
follow-ups of the form "and X?" / "what about X?" apart. Then
the time of one offline rewrite, p50 and p95 over every follow-up.

    .venv/bin/python scripts/conversation_eval.py [--file tests/conversations.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import respx

from knowledge_api.compose import build_service
from knowledge_api.config.fields import Secret
from knowledge_api.ingest.loaders import LoadOptions, load_paths
from knowledge_api.service import KnowledgeService
from knowledge_api.settings import Settings
from knowledge_api.usecases import conversation, references
from knowledge_api.usecases import query as query_use
from knowledge_api.usecases.query import QueryParams
from knowledge_api.usecases.references import Turn

HERE = Path(__file__).resolve().parent.parent
DEFAULT_FILE = HERE / "tests" / "conversations.json"
SHORT_FOLLOW_UP = 8
GEMINI = "https://gemini.eval"
WAYS = ("as is", "joined", "by hand", "offline", "LLM")


@dataclass(frozen=True, slots=True)
class FollowUp:
    conversation: str
    tuned: bool
    refers: int
    turns: tuple[Turn, ...]
    standalone: str
    passage: tuple[str, str]


def follow_ups(path: Path, titles: dict[str, str]) -> list[FollowUp]:
    """Every follow-up with the conversation before it, as a client sends it back."""
    found = []
    conversations = json.loads(path.read_text())["conversations"]
    for number, each in enumerate(conversations, start=1):
        said: list[Turn] = []
        for turn in each["turns"]:
            doc, section = turn["passage"]
            if "standalone" in turn:
                asked = (*said, Turn("user", turn["ask"]))
                found.append(
                    FollowUp(
                        each["id"],
                        number % 2 == 1 and not each.get("added_after_tuning", False),
                        turn["refers"],
                        asked,
                        turn["standalone"],
                        (doc, section),
                    )
                )
            title = " > ".join(part for part in (titles[doc], section) if part)
            said += [
                Turn("user", turn["ask"]),
                Turn("assistant", f"(the answer) [1]\n\nSources:\n[1] {title}", (title,)),
            ]
    return found


def elliptic(f: FollowUp) -> bool:
    """A follow-up of the form "and X?" / "what about X?"."""
    return bool(references.ELLIPSIS.match(f.turns[-1].text))


def joined(turns: Sequence[Turn]) -> str:
    asked = [turn.text for turn in turns if turn.role == "user"]
    query = asked[-1]
    if len(query.split()) < SHORT_FOLLOW_UP and len(asked) > 1:
        query = f"{asked[-2]} {query}"
    return query


async def found_at_5(service: KnowledgeService, question: str, passage: tuple[str, str]) -> bool:
    params = QueryParams(question[-500:], threshold=0.0, limit=5, synthesize=False)
    hits = (await query_use.search(service, params)).hits[:5]
    return any((hit.source_id, hit.chunk.section) == passage for hit in hits)


def gemini_reply(by_question: dict[str, str]) -> Callable[[httpx.Request], httpx.Response]:
    """The hand-written standalone question of the conversation in the prompt."""

    def reply(request: httpx.Request) -> httpx.Response:
        prompt = json.loads(request.content)["contents"][0]["parts"][0]["text"]
        last = [line for line in prompt.splitlines() if line.startswith("USER: ")][-1]
        text = by_question[last.removeprefix("USER: ")]
        candidate = {"content": {"parts": [{"text": text}], "role": "model"}}
        chunk = {"candidates": [{**candidate, "finishReason": "STOP"}]}
        return httpx.Response(200, content=b"data: " + json.dumps(chunk).encode() + b"\r\n\r\n")

    return reply


def table(rows: dict[str, dict[str, list[bool]]]) -> None:
    print(f"{'follow-ups':32}" + "".join(f"{way:>9}" for way in WAYS))
    for label, by_way in rows.items():
        n = len(by_way["as is"])
        cells = "".join(f"{100 * sum(by_way[w]) / n:8.1f}%" for w in WAYS)
        print(f"{label + f' (n={n})':32}{cells}")


async def run(path: Path, misses: bool) -> None:
    with tempfile.TemporaryDirectory() as folder:
        settings = Settings.from_env(environ={}, env_file=None).replace(
            db_path=Path(folder) / "eval.db",
            seed_on_empty=False,
            synthesizer="gemini,extractive",
            gemini_api_key=Secret("eval-key"),
            gemini_base_url=GEMINI,
        )
        service = build_service(settings)
        await service.start()
        docs = load_paths([service.seed_path()], LoadOptions()).documents
        await service.ingest(docs)
        titles = {doc.source_id: doc.title for doc in docs}
        asked = follow_ups(path, titles)
        by_question = {f.turns[-1].text: f.standalone for f in asked}
        results: list[dict[str, bool]] = []
        with respx.mock() as mock:
            mock.post(url__regex=rf"^{GEMINI}/").mock(side_effect=gemini_reply(by_question))
            for f in asked:
                by_llm = await conversation.standalone(service, f.turns)
                assert by_llm.by == "gemini", by_llm
                questions = {
                    "as is": f.turns[-1].text,
                    "joined": joined(f.turns),
                    "by hand": f.standalone,
                    "offline": conversation.offline(f.turns).searched,
                    "LLM": by_llm.searched,
                }
                results.append(
                    {way: await found_at_5(service, q, f.passage) for way, q in questions.items()}
                )
        await service.stop()

    def rows(keep: Callable[[FollowUp], bool]) -> dict[str, list[bool]]:
        chosen = [r for f, r in zip(asked, results, strict=True) if keep(f)]
        return {way: [r[way] for r in chosen] for way in WAYS}

    conversations = len({f.conversation for f in asked})
    added = {
        each["id"]
        for each in json.loads(path.read_text())["conversations"]
        if each.get("added_after_tuning")
    }
    print(f"{conversations} conversations, {len(asked)} follow-ups; recall@5 of the passage")
    table(
        {
            "tuned on": rows(lambda f: f.tuned),
            "held out": rows(lambda f: not f.tuned),
            "held out, added after": rows(lambda f: f.conversation in added),
            "held out, 1 turn back": rows(lambda f: not f.tuned and f.refers == 1),
            "held out, 2 turns back": rows(lambda f: not f.tuned and f.refers == 2),
            'held out, "and X?"': rows(lambda f: not f.tuned and elliptic(f)),
            "all": rows(lambda f: True),
        }
    )
    if misses:
        for f, r in zip(asked, results, strict=True):
            if r["by hand"] and not r["offline"]:
                print(f"missed offline, {f.conversation}: {f.turns[-1].text!r}")
                print(f"  searched {conversation.offline(f.turns).searched!r}, in {f.passage}")
    rewrite_times(asked)


def rewrite_times(asked: Sequence[FollowUp], rounds: int = 200) -> None:
    samples = []
    for _ in range(rounds):
        for f in asked:
            started = time.perf_counter()
            conversation.offline(f.turns)
            samples.append((time.perf_counter() - started) * 1000)
    ordered = sorted(samples)
    p95 = ordered[round(0.95 * (len(ordered) - 1))]
    print(
        f"offline rewrite of a follow-up: p50 {statistics.median(ordered):.3f} ms, "
        f"p95 {p95:.3f} ms, max {ordered[-1]:.3f} ms (n={len(ordered)})"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--file", type=Path, default=DEFAULT_FILE)
    parser.add_argument(
        "--misses", action="store_true", help="list the follow-ups the offline rewrite misses"
    )
    args: Any = parser.parse_args(argv)
    asyncio.run(run(args.file, args.misses))


if __name__ == "__main__":
    main()
