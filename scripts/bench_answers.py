"""Server-side cost of grounded answers and synthesis, p50/p95.

Ingests the bundled docs with the local model into a temporary store, then times, with
both cache tiers emptied before every request:
- `query`: POST /v1/knowledge/query with synthesis (the chain, extractive link);
- `answer`: POST /v1/knowledge/answer (the same chain, then citations and confidence,
  entailment by embedding the answer's and the cited passages' sentences);
- `answer via gemini`: the same through the real google-genai SDK against an in-process
  HTTP stub (respx) that answers at once: the cost of the SDK and the chain's plumbing,
  without a provider's own latency.

    .venv/bin/python scripts/bench_answers.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import respx

from knowledge_api.compose import build_service
from knowledge_api.config.fields import Secret
from knowledge_api.ingest.loaders import LoadOptions, load_paths
from knowledge_api.routes import answer as answer_contract
from knowledge_api.service import KnowledgeService
from knowledge_api.settings import Settings
from knowledge_api.usecases import answers
from knowledge_api.usecases import query as query_use
from knowledge_api.usecases.answers import AnswerParams
from knowledge_api.usecases.query import QueryParams

QUESTIONS = [
    "How is a query answered?",
    "What does reciprocal rank fusion do?",
    "How is the similarity threshold applied?",
    "What happens when the embedding model cannot load?",
    "How are documents chunked?",
    "Which settings control the response cache?",
    "How do I delete a document?",
    "What does the health endpoint report?",
    "How are citations checked in an answer?",
    "What is the confidence level of an answer?",
    "How does streaming work?",
    "Which embedders are available?",
]
GEMINI_BODY = (
    b'data: {"candidates": [{"content": {"parts": [{"text": "The service embeds the query '
    b'and searches by meaning and keyword [1]."}], "role": "model"}, "finishReason": "STOP"}],'
    b' "usageMetadata": {"totalTokenCount": 40}}\r\n\r\n'
)


def percentiles(samples: list[float]) -> str:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return f"p50 {statistics.median(ordered):7.2f} ms  p95 {p95:7.2f} ms  (n={len(ordered)})"


async def timed(
    service: KnowledgeService, rounds: int, call: Callable[[str], Awaitable[Any]]
) -> list[float]:
    samples = []
    for _ in range(rounds):
        for question in QUESTIONS:
            service.caches.responses.clear()
            service.caches.embeddings.clear()
            start = time.perf_counter()
            await call(question)
            samples.append((time.perf_counter() - start) * 1000)
    return samples


async def run(rounds: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        settings = Settings.from_env(environ={}, env_file=None).replace(
            db_path=Path(folder) / "bench.db",
            seed_on_empty=False,
            gemini_api_key=Secret("bench-key"),
            gemini_base_url="https://gemini.bench",
            synthesizer="extractive",
        )
        service = build_service(settings)
        await service.start()
        await service.ingest(load_paths([service.seed_path()], LoadOptions()))
        threshold = 0.3
        grounded = {"answer": 0, "insufficient": 0}
        grounding_ms: list[float] = []

        async def search(q: str) -> None:
            await query_use.query(service, QueryParams(q, synthesize=False))

        async def query(q: str) -> None:
            await query_use.query(service, QueryParams(q))

        async def answer(q: str) -> None:
            body = answer_contract.render(await answers.answer(service, AnswerParams(q, threshold)))
            grounded["answer" if body["status"] == "success" else "insufficient"] += 1
            meta = body["metadata"]
            steps = meta["retrieval_time_ms"] + meta["generation_time_ms"]
            grounding_ms.append(meta["total_time_ms"] - steps)

        await timed(service, 1, answer)  # warm-up
        grounded.update(answer=0, insufficient=0)
        grounding_ms.clear()
        print(f"{len(QUESTIONS)} questions x {rounds} rounds, caches emptied before each")
        for label, call in (
            ("query, no synthesis (baseline)", search),
            ("query with synthesis (extractive)", query),
            ("answer (extractive)", answer),
        ):
            print(f"{label:34} {percentiles(await timed(service, rounds, call))}")
        print(f"{'  of which citations + confidence':34} {percentiles(grounding_ms)}")
        print(f"  grounded {grounded['answer']}, insufficient_context {grounded['insufficient']}")

        gemini = build_service(settings.replace(synthesizer="gemini,extractive"))
        await gemini.start()
        with respx.mock() as mock:
            mock.post(url__regex=r"^https://gemini\.bench/").mock(
                side_effect=lambda request: httpx.Response(200, content=GEMINI_BODY)
            )

            async def via_gemini(q: str) -> None:
                body = answer_contract.render(
                    await answers.answer(gemini, AnswerParams(q, threshold))
                )
                assert body["status"] != "success" or body["metadata"]["model"] != "extractive"

            await timed(gemini, 1, via_gemini)
            samples = await timed(gemini, rounds, via_gemini)
            print(f"{'answer via gemini (stubbed HTTP)':34} {percentiles(samples)}")
        await gemini.stop()
        await service.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    asyncio.run(run(parser.parse_args().rounds))


if __name__ == "__main__":
    main()
