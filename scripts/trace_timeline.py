"""A real trace of one query, drawn as a timeline (knowledge_api/docs/trace-timeline.png).

The service runs in process with OTEL_EXPORTER_OTLP_ENDPOINT set to the OTLP/HTTP
receiver of the tests (tests/otlp_receiver.py, bodies decoded with opentelemetry-proto),
on a small corpus, the local model and the offline answer; one query is asked twice
with a caller's traceparent (a miss, then a hit), and the spans the receiver got for
the miss are drawn: one bar per span, indented under its parent.

    .venv/bin/python scripts/trace_timeline.py [--out knowledge_api/docs/trace-timeline.png]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from starlette.testclient import TestClient  # noqa: E402

from knowledge_api import tracing  # noqa: E402
from knowledge_api.app import create_app  # noqa: E402
from knowledge_api.settings import Settings  # noqa: E402
from tests.conftest import corpus  # noqa: E402
from tests.otlp_receiver import OtlpReceiver, Received  # noqa: E402

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
TRACEPARENT = f"00-{TRACE_ID}-b7ad6b7169203331-01"
QUERY = {"query": "Why does the login page time out?", "limit": 3}


def received_trace(embedder: str) -> list[Received]:
    with tempfile.TemporaryDirectory() as folder, OtlpReceiver() as collector:
        settings = Settings.from_env(environ={}, env_file=None).replace(
            db_path=Path(folder) / "k.db",
            embedder=embedder,
            seed_on_empty=False,
            synthesizer="extractive",
            answer_threshold="0.2",
            otel_endpoint=collector.url,
        )
        app = create_app(settings)
        try:
            with TestClient(app) as client:
                client.portal.call(app.state.service.ingest, corpus())
                for _ in range(2):  # a miss, then a hit
                    answered = client.post(
                        "/v1/knowledge/answer", json=QUERY, headers={"traceparent": TRACEPARENT}
                    )
                    answered.raise_for_status()
            spans = collector.wait_for({"POST /v1/knowledge/answer", "knowledge.synthesis.link"})
        finally:
            tracing.disable()
    trace = [span for span in spans if span.trace_id == TRACE_ID]
    first = min(trace, key=lambda s: s.start_ns)  # the miss's request span
    return [s for s in trace if s.start_ns >= first.start_ns and s.end_ns <= first.end_ns]


def ordered(spans: list[Received]) -> list[tuple[Received, int]]:
    """Each span with its depth, parents before children, siblings by start."""
    children: dict[str, list[Received]] = {}
    ids = {s.span_id for s in spans}
    for span in spans:
        children.setdefault(span.parent_id if span.parent_id in ids else "", []).append(span)
    rows: list[tuple[Received, int]] = []

    def walk(parent: str, depth: int) -> None:
        for span in sorted(children.get(parent, []), key=lambda s: s.start_ns):
            rows.append((span, depth))
            walk(span.span_id, depth + 1)

    walk("", 0)
    return rows


def label(span: Received) -> str:
    attributes = span.attributes
    extra = ""
    if "knowledge.embed.batch_size" in attributes:
        extra = f" (batch {attributes['knowledge.embed.batch_size']})"
    elif "gen_ai.provider.name" in attributes:
        extra = f" ({attributes['gen_ai.provider.name']})"
    elif "knowledge.cache.hit" in attributes:
        extra = " (hit)" if attributes["knowledge.cache.hit"] else " (miss)"
    return span.name + extra


def draw(spans: list[Received], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = ordered(spans)
    start = min(s.start_ns for s, _ in rows)
    fig, ax = plt.subplots(figsize=(10, 0.42 * len(rows) + 1.2))
    for y, (span, depth) in enumerate(rows):
        left = (span.start_ns - start) / 1e6
        ax.barh(y, max(span.ms, 0.02), left=left, color=f"C{depth}", height=0.6)
        ax.text(left + span.ms, y, f" {span.ms:.2f} ms", va="center", fontsize=8)
    labels = ["    " * depth + label(span) for span, depth in rows]
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(labels, fontsize=8, ha="left", family="monospace")
    ax.tick_params(axis="y", pad=5 * max(len(text) for text in labels))  # indented, left-aligned
    ax.invert_yaxis()
    ax.set_xlabel("milliseconds since the request span began")
    ax.set_title(
        "POST /v1/knowledge/answer, a miss: spans as an OTLP/HTTP collector received them",
        fontsize=10,
    )
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"{out}: {len(rows)} spans")
    for span, depth in rows:
        print(f"  {'  ' * depth}{label(span)}: {span.ms:.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "knowledge_api/docs/trace-timeline.png")
    parser.add_argument("--embedder", default="local", help="local (the real model) or fake")
    args = parser.parse_args()
    draw(received_trace(args.embedder), args.out)


if __name__ == "__main__":
    main()
