"""Offline answers to ten questions over real documentation that is not the bundled docs:
the READMEs of 40 installed packages (the long description in their dist-info METADATA).

    python scripts/answers_on_readmes.py [--site-packages DIR] [--work DIR]

Copies each README into a temporary folder (Markdown as .md, reStructuredText and
plain text as .txt), indexes them with `knowledge-api ingest` into a temporary SQLite
store, then asks each question through the query use case with the extractive
synthesizer and prints the answer and the sources it cites. Judging whether each
answer answers its question is left to the reader.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

PACKAGES = [
    "tqdm",
    "orjson",
    "python_dotenv",
    "threadpoolctl",
    "pytz",
    "psutil",
    "httpcore",
    "rich",
    "redis",
    "typer",
    "groq",
    "sse_starlette",
    "pathspec",
    "mmh3",
    "trafilatura",
    "qdrant_client",
    "pybase64",
    "tld",
    "portalocker",
    "sortedcontainers",
    "fsspec",
    "bcrypt",
    "tokenizers",
    "htmldate",
    "attrs",
    "aiohttp_retry",
    "h11",
    "websocket_client",
    "markdown_it_py",
    "pytest",
    "tzlocal",
    "jsonschema",
    "pypdf",
    "urllib3",
    "python_dateutil",
    "dateparser",
    "charset_normalizer",
    "yarl",
    "propcache",
    "frozenlist",
]

QUESTIONS = (
    "How do I load variables from a .env file into the environment?",
    "How do I limit the number of threads used by BLAS libraries?",
    "How do I show a progress bar around an iterable?",
    "Which hash algorithm does mmh3 implement?",
    "How does bcrypt protect a password against brute force?",
    "How do I find out which local timezone the machine uses?",
    "What does orjson serialize faster than the standard json library?",
    "How do I retry failed aiohttp requests?",
    "How do I extract the main text of a web page?",
    "What is the maximum cost factor (rounds) that bcrypt accepts?",
)


def readme_of(dist_info: Path) -> tuple[str, str]:
    """(text, suffix) of the long description: the METADATA body after its headers."""
    raw = (dist_info / "METADATA").read_text(encoding="utf-8", errors="replace")
    headers, _, body = raw.partition("\n\n")
    markdown = "text/markdown" in headers.casefold()
    return body, ".md" if markdown else ".txt"


def copy_readmes(site_packages: Path, target: Path) -> list[Path]:
    written = []
    for package in PACKAGES:
        found = sorted(site_packages.glob(f"{package}-*.dist-info"))
        if not found:
            print(f"not installed: {package}", file=sys.stderr)
            continue
        body, suffix = readme_of(found[0])
        path = target / f"{package}{suffix}"
        path.write_text(body, encoding="utf-8")
        written.append(path)
    return written


async def ask(db: Path) -> None:
    from knowledge_api import compose
    from knowledge_api.settings import Settings
    from knowledge_api.usecases.query import QueryParams, query

    settings = Settings.from_env().replace(db_path=db, synthesizer="extractive")
    service = compose.build_service(settings)
    await service.start()
    try:
        for number, question in enumerate(QUESTIONS, start=1):
            started = time.perf_counter()
            served = await query(service, QueryParams(query=question, limit=5, threshold=0.2))
            elapsed = (time.perf_counter() - started) * 1000
            result = served.value
            synthesis_ms = result.timings.get("synthesis_ms", 0.0)
            print(f"Q{number}. {question}  ({elapsed:.0f} ms, synthesis {synthesis_ms:.0f} ms)")
            print(f"A: {result.outcome.text if result.outcome else '-'}")
            for n, hit in enumerate(result.hits, start=1):
                print(f"   [{n}] {hit.chunk.title} > {hit.chunk.section}  {hit.similarity:.2f}")
            print()
    finally:
        await service.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--site-packages", type=Path, default=Path(sysconfig.get_paths()["purelib"])
    )
    parser.add_argument("--work", type=Path, help="keep the READMEs and the store here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        work = args.work or Path(scratch)
        docs = work / "readmes"
        docs.mkdir(parents=True, exist_ok=True)
        db = work / "readmes.db"
        files = copy_readmes(args.site_packages, docs)
        env = {**os.environ, "KNOWLEDGE_DB_PATH": str(db), "KNOWLEDGE_SEED_ON_EMPTY": "false"}
        command = [sys.executable, "-m", "knowledge_api", "ingest", *map(str, files)]
        subprocess.run(command, env=env, check=True)
        os.environ.update(KNOWLEDGE_DB_PATH=str(db), KNOWLEDGE_SEED_ON_EMPTY="false")
        asyncio.run(ask(db))
    return 0


if __name__ == "__main__":
    sys.exit(main())
