"""Files over HTTP: upload-to-searchable time of 100 files against the embedder's own
rate on the same passages, and the service's memory while a 50 MB file is uploaded.

A service (`knowledge-api serve`, the local embedder, a fresh SQLite file) is started;
100 files of a few pages each (a third PDF, a third Word, a third HTML, their text from
the MS MARCO passages) go in one POST /v1/knowledge/files, and the job is polled until
it is done; a query then finds a passage of the last file. In the same run the bench
process loads the same embedder and embeds the same passages (read and chunked as the
service reads them), once before the upload and once after, so that the host's swings
weigh on both sides: their ratio is the cost of extraction, chunking, the job and the
store (the budget: upload-to-searchable <= 1.2 x the embedding alone). Then a 50 MB file
is uploaded while the service's resident memory is sampled every 10 ms (the budget:
<= 100 MB above idle).

    .venv/bin/python scripts/bench_uploads.py [--files 100] [--big-mb 50]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from contextlib import ExitStack
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from knowledge_api.compose import build_embedder  # noqa: E402
from knowledge_api.ingest.loaders import LoadOptions, load_as  # noqa: E402
from knowledge_api.ingest.pipeline import chunked  # noqa: E402
from knowledge_api.settings import Settings  # noqa: E402
from scripts.bench_http import HOST, free_port, serve_command, start_server  # noqa: E402
from tests.documents import pdf_bytes  # noqa: E402

DEFAULT_CORPUS = ROOT.parent / "shared" / "datasets" / "msmarco-dev" / "corpus.jsonl"
PAGES = 3
PASSAGES_PER_PAGE = 4
PRINTABLE = re.compile(r"[^A-Za-z0-9 .,;:'!?%&+=/-]")


def passages(corpus: Path) -> list[str]:
    with corpus.open(encoding="utf-8") as lines:
        return [PRINTABLE.sub(" ", json.loads(line)["text"]) for line in lines]


def pages_of(texts: list[str], start: int) -> list[list[str]]:
    per_file = PAGES * PASSAGES_PER_PAGE
    chosen = texts[start * per_file : (start + 1) * per_file]
    return [chosen[p * PASSAGES_PER_PAGE : (p + 1) * PASSAGES_PER_PAGE] for p in range(PAGES)]


def pdf_file(pages: list[list[str]]) -> bytes:
    lines = [[line for text in page for line in textwrap.wrap(text, 90)] for page in pages]
    return pdf_bytes(lines)


def docx_file(pages: list[list[str]], folder: Path, n: int) -> bytes:
    import docx

    document = docx.Document()
    for number, page in enumerate(pages, 1):
        document.add_heading(f"Part {number}", level=1)
        for text in page:
            document.add_paragraph(text)
    path = folder / f"{n}.docx"
    document.save(str(path))
    return path.read_bytes()


def html_file(pages: list[list[str]]) -> bytes:
    body = "".join(
        f"<h2>Part {number}</h2>" + "".join(f"<p>{text}</p>" for text in page)
        for number, page in enumerate(pages, 1)
    )
    return (
        "<html><head><title>Bench</title></head><body><nav>Home | Next | Up</nav>"
        f"<main><h1>Bench page</h1>{body}</main><footer>Copyright</footer></body></html>"
    ).encode()


def make_files(count: int, corpus: Path, folder: Path) -> list[tuple[str, bytes]]:
    texts = passages(corpus)
    files = []
    for n in range(count):
        pages = pages_of(texts, n)
        kind = ("pdf", "docx", "html")[n % 3]
        if kind == "pdf":
            data = pdf_file(pages)
        elif kind == "docx":
            data = docx_file(pages, folder, n)
        else:
            data = html_file(pages)
        files.append((f"file-{n:03d}.{kind}", data))
    return files


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def server_pid(port: int) -> int:
    """The process listening on `port` (the service started by the bench)."""
    out = subprocess.run(["ss", "-ltnpH", f"sport = :{port}"], capture_output=True, text=True)
    match = re.search(r"pid=(\d+)", out.stdout)
    if match is None:
        raise SystemExit(f"no process found listening on {port}")
    return int(match.group(1))


def wait_done(client: httpx.Client, job_id: str) -> dict[str, object]:
    while True:
        job: dict[str, object] = client.get(f"/v1/knowledge/jobs/{job_id}").json()
        if job["status"] in ("done", "failed"):
            return job
        time.sleep(0.02)


def embedding_alone(files: list[tuple[str, bytes]], folder: Path) -> tuple[int, float]:
    """(passages, seconds) to embed the files' passages in this process."""
    texts = []
    folder.mkdir()
    for name, data in files:
        path = folder / name
        path.write_bytes(data)
        for doc in chunked(load_as(path, name, LoadOptions(), [])):
            texts += [chunk.embedded_text for chunk in doc.chunks]
    embedder = build_embedder(Settings.from_env(environ={}, env_file=None))
    embedder.load()
    embedder.embed_documents(texts[:64])  # warm
    started = time.perf_counter()
    embedder.embed_documents(texts)
    return len(texts), time.perf_counter() - started


def upload_memory(
    client: httpx.Client, pid: int, folder: Path, size_mb: int
) -> tuple[float, float]:
    """(idle RSS, peak RSS) of the service while a `size_mb` file is uploaded."""
    big = folder / "big.bin"
    with big.open("wb") as out:
        for _ in range(size_mb):
            out.write(random.randbytes(2**20))
    idle = rss_mb(pid)
    peak = idle
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, rss_mb(pid))
            time.sleep(0.01)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        with big.open("rb") as data:
            response = client.post("/v1/knowledge/files", files=[("file", ("big.bin", data))])
        wait_done(client, response.json()["job_id"])
    finally:
        done.set()
        sampler.join()
    return idle, peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=100)
    parser.add_argument("--big-mb", type=int, default=50)
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        cwd = Path(tmp)
        files = make_files(args.files, args.corpus, cwd)
        port = free_port()
        env = {
            **os.environ,
            "KNOWLEDGE_DB_PATH": str(cwd / "knowledge.db"),
            "KNOWLEDGE_SEED_ON_EMPTY": "false",
            "KNOWLEDGE_LOG_LEVEL": "warning",
        }
        url = f"http://{HOST}:{port}"
        start_server(stack, serve_command(port), env, cwd, url)
        client = stack.enter_context(httpx.Client(base_url=url, timeout=600))
        size = sum(len(data) for _, data in files)

        before = embedding_alone(files, cwd / "alone-1")
        started = time.perf_counter()
        response = client.post("/v1/knowledge/files", files=[("file", f) for f in files])
        accepted = time.perf_counter() - started
        job = wait_done(client, response.json()["job_id"])
        searchable = time.perf_counter() - started
        ask = {"query": passages(args.corpus)[0][:200], "synthesize": False, "limit": 1}
        hit = client.post("/v1/knowledge/query", json=ask).json()["results"]
        chunks = job["chunks"]
        assert job["status"] == "done" and not job["errors"], job
        assert hit, "the first file's first passage is not found"

        after = embedding_alone(files, cwd / "alone-2")
        count, alone = before[0], (before[1] + after[1]) / 2
        idle, peak = upload_memory(client, server_pid(port), cwd, args.big_mb)

    print(f"upload of {args.files} files (PDF, DOCX, HTML; {size / 2**20:.1f} MB), one request:")
    print(f"  accepted (202) after {accepted:.2f} s, searchable after {searchable:.2f} s")
    print(f"  passages: {chunks}")  # type: ignore[str-bytes-safe]
    print(
        f"  the embedder alone on the same {count} passages, before and after: "
        f"{before[1]:.2f} s and {after[1]:.2f} s ({count / alone:.0f}/s on their mean)"
    )
    ratio = searchable / alone
    verdict = "within" if ratio <= 1.2 else "OVER"
    print(f"  upload-to-searchable / embedding alone: {ratio:.2f} ({verdict} the 1.2 budget)")
    print(f"memory of the service during a {args.big_mb} MB upload:")
    grew = peak - idle
    verdict = "within" if grew <= 100 else "OVER"
    print(f"  idle {idle:.0f} MB, peak {peak:.0f} MB: +{grew:.0f} MB ({verdict} the 100 MB budget)")


if __name__ == "__main__":
    main()
