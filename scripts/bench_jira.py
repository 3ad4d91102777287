"""A Jira project as a connector source: an unchanged 10,000-issue project synced again
(the whole command), a full sync's cost beyond the embedding, and the memory reading
the project takes.

    .venv/bin/python scripts/bench_jira.py [--issues 10000] [--runs 3] [--full-issues 10000]

The project is the tests' fake Jira Cloud (tests/atlassian_server.py: a real HTTP
server on loopback, in this process), 100 issues a search page, each issue an MS MARCO
passage as its description (a generated sentence when the corpus is absent) and two
comments; one issue in 50 has four, so its comment list is read too.

Unchanged: `knowledge-api sources sync` runs once to read the project (the fake
embedder makes its vectors), then `--runs` times on it unchanged, each the whole
command in a new process: Python's start, the account's time zone, the window's
search (nothing updated since the cursor less the overlap), the key of every issue
for pruning (100 pages), comparing with the store. Nothing changed, so no model loads
(the budget: <= 10 s).

Full sync (`--full-issues` issues, a fresh SQLite file, the local model, in this
process): `sources sync --full` as the command runs it (`sync_source`), against the
same issues' passages embedded alone (read and chunked as the sync makes them) once
before and once after, so that the host's swings weigh on both sides. What the sync
costs beyond the embedding (the search pages, the issues to Markdown, chunking, the
store) over the embedding time is the budget's figure (<= 20 %). On a busy host the
difference of two long timings is noise, so the same sync also runs with the fake
embedder into another fresh file: that time is what the sync costs without the model,
measured directly.

Memory: the connector reads a quarter of the project and the whole of it under
tracemalloc. Pages are streamed: what reading costs beyond the documents it hands
back (one page of issues and its JSON at a time) stays the same as the project grows
(the budget: flat).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import tracemalloc
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from knowledge_api.compose import build_service  # noqa: E402
from knowledge_api.connectors.jira import JiraConnector  # noqa: E402
from knowledge_api.ledger import Actor  # noqa: E402
from knowledge_api.models import ConnectorSource  # noqa: E402
from knowledge_api.settings import Settings  # noqa: E402
from knowledge_api.usecases.connectors import add_source, find_source, sync_source  # noqa: E402
from scripts.bench_mail import DEFAULT_CORPUS, embedded_alone, passages  # noqa: E402
from scripts.bench_sources import command, environment  # noqa: E402
from tests.atlassian_server import EMAIL, TOKEN, Atlassian, Comment, Issue, serving  # noqa: E402

TOKEN_VARIABLE = "BENCH_JIRA_TOKEN"


def project(texts: list[str]) -> Atlassian:
    """A Jira Cloud whose project OPS has an issue per passage, none changing."""
    jira = Atlassian(cloud=True)
    jira.frozen = True
    start = datetime.now(UTC) - timedelta(days=400)
    for n, text in enumerate(texts, 1):
        created = start + timedelta(minutes=30 * n)
        comments = [
            Comment("Grace Hopper" if k % 2 else "Ada Lovelace", created + timedelta(hours=k),
                    f"Step {k} on ticket {n}: checked service {n % 97} with team {n % 13}.")
            for k in range(4 if n % 50 == 0 else 2)
        ]  # fmt: skip
        summary = " ".join(text.split()[:8])
        jira.issues[f"OPS-{n}"] = Issue(
            f"OPS-{n}", summary, text, created, created + timedelta(hours=5), comments=comments
        )
    return jira


def source(url: str) -> ConnectorSource:
    return ConnectorSource(
        "jira",
        url,
        settings={"deployment": "cloud", "user": EMAIL, "jql": "project = OPS"},
        secrets={"token": TOKEN_VARIABLE},
    )


def unchanged(texts: list[str], runs: int) -> None:
    with serving(project(texts)) as jira, tempfile.TemporaryDirectory() as tmp:
        env = {**environment(Path(tmp), "sqlite"), TOKEN_VARIABLE: TOKEN}
        command(
            env, "sources", "add", "jira", "--kind", "jira", "--url", jira.url,
            "--collection", "ops", "--set", "deployment=cloud", "--set", f"user={EMAIL}",
            "--set", "jql=project = OPS", "--secret", f"token={TOKEN_VARIABLE}",
        )  # fmt: skip
        seconds, _, line = command(env, "sources", "sync", "jira")
        print(f"first sync of {len(texts)} issues: {seconds:.1f} s ({line})", flush=True)
        walls, cpus = [], []
        for _ in range(runs):
            jira.calls.clear()
            wall, cpu, line = command(env, "sources", "sync", "jira")
            walls.append(wall)
            cpus.append(cpu)
        print(f"sources sync, unchanged: {line}; {len(jira.calls)} requests a run")
        print(
            f"whole command over {runs} runs: wall min {min(walls):.2f} s, median "
            f"{statistics.median(walls):.2f} s, max {max(walls):.2f} s; CPU median "
            f"{statistics.median(cpus):.2f} s; budget <= 10 s; load average "
            f"{os.getloadavg()[0]:.1f}",
            flush=True,
        )


def memory(texts: list[str]) -> None:
    os.environ[TOKEN_VARIABLE] = TOKEN
    for count in (len(texts) // 4, len(texts)):
        with serving(project(texts[:count])) as jira:
            connector = JiraConnector(source(jira.url), "ops")
            tracemalloc.start()
            window = connector.changed("")
            held, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            connector.close()
            print(
                f"reading {count} issues: documents {held / 2**20:.1f} MB, reading beyond "
                f"them {(peak - held) / 2**20:.2f} MB at its peak ({len(window.documents)} "
                "documents)",
                flush=True,
            )


def embedding_alone(url: str, settings: Settings) -> tuple[int, float]:
    """(passages, seconds) to embed the issues' passages alone in this process."""
    connector = JiraConnector(source(url), "ops")
    try:
        documents = connector.changed("").documents
    finally:
        connector.close()
    return embedded_alone(documents, settings)


async def full_sync(url: str, settings: Settings) -> tuple[str, float]:
    """(the sync's summary, seconds) of `sources sync --full` into a fresh store."""
    service = build_service(settings)
    await service.start()
    try:
        await service.embed_documents(["warm the model"] * 64)
        await add_source(service, "ops", "jira", source(url))
        info, found = await find_source(service, "jira", "ops")
        started = time.perf_counter()
        result = await sync_source(service, info, found, Actor("bench"), full=True)
        seconds = time.perf_counter() - started
    finally:
        await service.stop()
    if result.error:
        raise SystemExit(f"the full sync stopped: {result.error}")
    return result.line(), seconds


def full(texts: list[str]) -> None:
    os.environ[TOKEN_VARIABLE] = TOKEN
    with serving(project(texts)) as jira, tempfile.TemporaryDirectory() as tmp:
        settings = Settings.from_env(environ={}, env_file=None).replace(
            seed_on_empty=False, db_path=Path(tmp) / "knowledge.db"
        )
        count, before = embedding_alone(jira.url, settings)
        line, seconds = asyncio.run(full_sync(jira.url, settings))
        _, after = embedding_alone(jira.url, settings)
        fake = settings.replace(embedder="fake", db_path=Path(tmp) / "fake.db")
        _, beyond = asyncio.run(full_sync(jira.url, fake))
        alone = statistics.mean([before, after])
        print(f"embedding alone: {count} passages in {before:.1f} s / {after:.1f} s")
        print(
            f"full sync of {len(texts)} issues: {line} in {seconds:.1f} s; beyond the "
            f"embedding {seconds - alone:.1f} s = {(seconds - alone) / alone:.0%} of it "
            f"(budget <= 20 %); load average {os.getloadavg()[0]:.1f}",
            flush=True,
        )
        print(
            f"the same full sync with the fake embedder (its cost beyond the model): "
            f"{beyond:.1f} s = {beyond / alone:.0%} of the embedding alone",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--issues", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3, help="unchanged syncs timed")
    parser.add_argument("--full-issues", type=int, default=10_000, help="0: no full sync")
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--skip-unchanged", action="store_true")
    parser.add_argument("--skip-memory", action="store_true")
    args = parser.parse_args()
    wanted = max(args.issues, args.full_issues)
    texts = passages(args.corpus, wanted)
    texts = [texts[n % len(texts)] for n in range(wanted)]  # a corpus shorter: again
    if not args.skip_unchanged:
        unchanged(texts[: args.issues], args.runs)
    if not args.skip_memory:
        memory(texts[: args.issues])
    if args.full_issues:
        full(texts[: args.full_issues])


if __name__ == "__main__":
    main()
