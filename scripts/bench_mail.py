"""A mailbox as threads: a 10,000-message mbox read, threaded and indexed against the
embedder's own rate on the same passages, and the memory its reading takes.

    .venv/bin/python scripts/bench_mail.py [--messages 10000] [--per-thread 4]
    .venv/bin/python scripts/bench_mail.py --imap [--messages 10000] [--runs 3]

The mbox is written here: threads of `--per-thread` messages, each reply quoting the
message before it under an "On ... wrote:" line and signed, the text of each message
an MS MARCO passage (a generated sentence when the corpus is absent). The service
(the local embedder, a fresh SQLite file) is built in this process; the mbox is read
(`load_paths`, as `knowledge-api ingest` reads it) and indexed (`service.ingest`), and
the same process embeds the same passages alone (read and chunked as the service
reads them) once before and once after, so that the host's swings weigh on both
sides. Their ratio is the cost of parsing, threading, chunking and the store (the
budget: <= 1.2 x the embedding alone).

Memory: the mbox is read twice under tracemalloc, at a quarter of its messages and
whole. Messages are streamed, so what reading costs beyond the thread index it keeps
(each message's headers and own text) stays the same as the file grows (the budget:
flat); the thread documents are then built from the index.

IMAP (`--imap`): the same messages in one folder of a real Dovecot, started as the
connector's tests start it (skipped, saying how to install it, where it is absent).
`knowledge-api sources sync` runs once to read the folder, then `--runs` times on it
unchanged, each the whole command (a new process: Python's start, the login, listing
the folder's UIDs and the thread headers of every message, comparing them with the
cursor). Nothing changed, so no model loads: the fake embedder makes the first sync's
vectors (the budget: an unchanged sync <= 5 s).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from knowledge_api.compose import build_embedder, build_service  # noqa: E402
from knowledge_api.ingest.loaders import LoadOptions, load_paths  # noqa: E402
from knowledge_api.ingest.mail import Threads  # noqa: E402
from knowledge_api.ingest.pipeline import chunked  # noqa: E402
from knowledge_api.models import Document  # noqa: E402
from knowledge_api.settings import Settings  # noqa: E402
from scripts.bench_sources import command, environment  # noqa: E402
from tests.imap_server import DOVECOT, PASSWORD, USER, dovecot, owned  # noqa: E402

DEFAULT_CORPUS = ROOT.parent / "shared" / "datasets" / "msmarco-dev" / "corpus.jsonl"
PRINTABLE = re.compile(r"[^A-Za-z0-9 .,;:'!?%&+=/-]")


def passages(corpus: Path, count: int) -> list[str]:
    if not corpus.exists():
        return [
            f"Ticket note {n}: the service {n % 97} restarts after step {n % 13}, "
            f"owned by team {n % 11}."
            for n in range(count)
        ]
    texts = []
    with corpus.open(encoding="utf-8") as lines:
        for line in lines:
            texts.append(PRINTABLE.sub(" ", json.loads(line)["text"]))
            if len(texts) == count:
                break
    return texts


def messages(texts: list[str], per_thread: int) -> Iterator[tuple[int, bytes]]:
    """(the sender's number in its thread, the message) for each passage: threads of
    `per_thread` messages, each reply quoting the one before and signed."""
    for n, text in enumerate(texts):
        thread, k = divmod(n, per_thread)
        ids = [f"<t{thread}-{i}@bench.example>" for i in range(k + 1)]
        body = f"{text}\n"
        if k:
            quoted = "\n".join(f"> {line}" for line in texts[n - 1].split(". "))
            body += f"\nOn Mon, 5 Oct 2026, Person {k - 1} wrote:\n{quoted}\n"
        body += f"\n-- \nPerson {k}\nExample Support, +49 30 {n:06}\n"
        headers = [
            f"From: Person {k} <p{k}@bench.example>",
            "To: Support <support@bench.example>",
            f"Subject: {'Re: ' if k else ''}Ticket {thread}",
            f"Date: Mon, 05 Oct 2026 {k % 24:02}:{thread % 60:02}:00 +0000",
            f"Message-ID: {ids[-1]}",
            "Content-Type: text/plain; charset=utf-8",
        ]
        if k:
            headers += [f"In-Reply-To: {ids[-2]}", f"References: {' '.join(ids[:-1])}"]
        message = "\n".join(headers) + "\n\n" + body.replace("\nFrom ", "\n>From ")
        yield k, message.encode()


def write_mbox(path: Path, texts: list[str], per_thread: int) -> None:
    with path.open("wb") as box:
        for k, message in messages(texts, per_thread):
            box.write(f"From p{k}@bench.example Mon Oct  5 00:00:00 2026\n".encode())
            box.write(message + b"\n")


def memory(path: Path) -> tuple[float, float, float]:
    """(MB of the thread index once the mbox is read, MB more at the peak of reading
    it, MB of the documents built from the index)."""
    threads = Threads()
    tracemalloc.start()
    threads.read(path, path.name)
    index, peak = tracemalloc.get_traced_memory()
    documents = threads.documents()
    built, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del documents
    return index / 2**20, (peak - index) / 2**20, (built - index) / 2**20


def embedding_alone(path: Path, settings: Settings) -> tuple[int, float]:
    """(passages, seconds) to embed the mbox's passages alone in this process."""
    return embedded_alone(load_paths([path], LoadOptions()).documents, settings)


def embedded_alone(documents: list[Document], settings: Settings) -> tuple[int, float]:
    """(passages, seconds) to embed the passages of `documents` in this process, the
    model loaded and warm first."""
    texts = [chunk.embedded_text for doc in chunked(documents) for chunk in doc.chunks]
    embedder = build_embedder(settings)
    embedder.load()
    embedder.embed_documents(texts[:64])  # warm
    started = time.perf_counter()
    embedder.embed_documents(texts)
    return len(texts), time.perf_counter() - started


async def indexed(path: Path, settings: Settings) -> tuple[str, float]:
    """(the index summary, seconds) of reading, threading and indexing the mbox."""
    service = build_service(settings)
    await service.start()
    try:
        await service.embed_documents(["warm the model"] * 64)
        started = time.perf_counter()
        loaded = load_paths([path], LoadOptions())
        summary = await service.ingest(loaded.documents)
        seconds = time.perf_counter() - started
    finally:
        await service.stop()
    return f"{len(loaded.documents)} threads, {summary.chunks} chunks", seconds


def bench_imap(texts: list[str], per_thread: int, runs: int) -> None:
    """An IMAP folder of these messages in a real Dovecot (started as the connector's
    tests start it), synced once and then again unchanged, each sync the whole command."""
    if DOVECOT is None:
        print("IMAP row skipped: Dovecot is not installed (apt-get install dovecot-imapd)")
        return
    with dovecot() as mailbox, tempfile.TemporaryDirectory() as tmp:
        maildir = mailbox.home / "Maildir" / ".Support"
        for part in ("cur", "new", "tmp"):
            (maildir / part).mkdir(parents=True)
        for n, (_, message) in enumerate(messages(texts, per_thread)):
            (maildir / "cur" / f"{n:06}.bench:2,S").write_bytes(message)
        owned(mailbox.home)
        env = {
            **environment(Path(tmp), "sqlite"),
            "MAIL_PASSWORD": PASSWORD,
        }
        command(
            env, "sources", "add", "mail", "--kind", "imap", "--url", mailbox.url,
            "--collection", "support", "--set", f"user={USER}", "--set", "folders=Support",
            "--secret", "password=MAIL_PASSWORD",
        )  # fmt: skip
        seconds, _, line = command(env, "sources", "sync", "mail")
        print(f"first sync of {len(texts)} messages: {seconds:.1f} s ({line})", flush=True)
        walls, cpus = [], []
        for _ in range(runs):
            wall, cpu, line = command(env, "sources", "sync", "mail")
            walls.append(wall)
            cpus.append(cpu)
        print(f"sources sync, unchanged: {line}")
        print(
            f"whole command over {runs} runs: wall min {min(walls):.2f} s, median "
            f"{statistics.median(walls):.2f} s, max {max(walls):.2f} s; CPU median "
            f"{statistics.median(cpus):.2f} s; budget <= 5 s; load average "
            f"{os.getloadavg()[0]:.1f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--per-thread", type=int, default=4)
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--memory-only", action="store_true", help="skip the indexing")
    parser.add_argument(
        "--imap", action="store_true", help="the unchanged IMAP folder's sync instead"
    )
    parser.add_argument("--runs", type=int, default=3, help="unchanged IMAP syncs timed")
    args = parser.parse_args()
    if args.imap:
        bench_imap(passages(args.corpus, args.messages), args.per_thread, args.runs)
        return
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        texts = passages(args.corpus, args.messages)
        quarter, whole = folder / "quarter.mbox", folder / "whole.mbox"
        write_mbox(quarter, texts[: len(texts) // 4], args.per_thread)
        write_mbox(whole, texts, args.per_thread)
        for path, label in ((quarter, f"{len(texts) // 4}"), (whole, f"{len(texts)}")):
            index, reading, documents = memory(path)
            size = path.stat().st_size / 2**20
            print(
                f"reading {label} messages ({size:.1f} MB mbox): thread index {index:.1f} MB, "
                f"reading beyond it {reading:.2f} MB at its peak; documents {documents:.1f} MB",
                flush=True,
            )
        if args.memory_only:
            return
        settings = Settings.from_env(environ={}, env_file=None).replace(
            seed_on_empty=False, db_path=folder / "knowledge.db"
        )
        passages_count, before = embedding_alone(whole, settings)
        what, seconds = asyncio.run(indexed(whole, settings))
        _, after = embedding_alone(whole, settings)
        alone = statistics.mean([before, after])
        print(f"embedding alone: {passages_count} passages in {before:.1f} s / {after:.1f} s")
        print(
            f"mbox read, threaded and indexed: {what} in {seconds:.1f} s = "
            f"{seconds / alone:.2f} x the embedding alone (budget <= 1.20)"
        )


if __name__ == "__main__":
    main()
