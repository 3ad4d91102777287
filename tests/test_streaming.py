"""Server-Sent Events over a real socket: uvicorn serves the app, httpx reads the stream
and a spec-following parser splits it into events. Gemini is answered by respx."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx

from knowledge_api.app import create_app
from knowledge_api.models import SOURCE_TYPES
from tests import providers
from tests.loopback import serving_app
from tests.providers import GEMINI_GENERATE, GROQ_CHAT, Stream, gemini_chunk, llm_settings, streamed

QUESTION = "Which audio formats does asset ingestion accept?"
DOCUMENTS = [
    {
        "source_type": "knowledge",
        "source_id": "kb-7",
        "title": "Supported audio formats",
        "content": "Asset ingestion accepts WAV and FLAC audio files. MP3 uploads are "
        "converted to FLAC before ingestion.",
    },
    {
        "source_type": "jira",
        "source_id": "SIAM-101",
        "title": "Login timeout",
        "content": "The login page times out after 30 seconds when SSO is slow.",
    },
]


@pytest.fixture
def mock() -> Iterator[respx.MockRouter]:
    for router in providers.mocked():
        router.route(host="127.0.0.1").pass_through()
        yield router


@pytest.fixture
def server(tmp_path: Path, mock: respx.MockRouter) -> Iterator[str]:
    """The app on a free loopback port, as `knowledge-api serve` runs it."""
    settings = llm_settings(tmp_path, gemini_timeout=5.0)
    with serving_app(create_app(settings), loop="uvloop", http="httptools") as url:
        created = httpx.post(f"{url}/v1/knowledge/documents", json={"documents": DOCUMENTS})
        assert created.status_code == 201
        yield url


def server_sent_events(lines: Iterable[str]) -> Iterator[tuple[str, Any]]:
    """Events as the SSE spec defines them: fields until a blank line, data joined."""
    name, data = "message", []
    for line in lines:
        if not line:
            if data:
                yield name, json.loads("\n".join(data))
            name, data = "message", []
        elif not line.startswith(":"):
            field, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if field == "event":
                name = value
            elif field == "data":
                data.append(value)


def gemini_stream(pieces: list[str], pause: float, held: threading.Event | None = None) -> Stream:
    chunks = [gemini_chunk(p) for p in pieces[:-1]] + [gemini_chunk(pieces[-1], "STOP", 64)]
    return Stream(chunks, pause=pause, held=held)


def test_an_answer_streams_as_gemini_writes_it(server: str, mock: respx.MockRouter) -> None:
    """Gemini holds the rest of its answer until the client has read the first words:
    were the answer sent whole at the end, the client would wait forever (30 s)."""
    pieces = ["Asset ingestion ", "accepts WAV ", "and FLAC ", "files [1]."]
    first_read = threading.Event()
    gemini = gemini_stream(pieces, pause=0.05, held=first_read)
    mock.post(url__regex=GEMINI_GENERATE).mock(return_value=streamed(gemini))
    events: list[tuple[str, Any]] = []
    sent_at_first_delta = -1
    body = {"query": QUESTION, "stream": True, "threshold": 0.2}
    with httpx.stream("POST", f"{server}/v1/knowledge/answer", json=body) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        for event in server_sent_events(response.iter_lines()):
            if event[0] == "answer" and sent_at_first_delta < 0:
                sent_at_first_delta = gemini.sent
                first_read.set()
            events.append(event)
    assert sent_at_first_delta <= 1  # the first words came before the rest was sent
    names = [name for name, _ in events]
    assert names[0] == "results" and names[-1] == "done"
    assert names.count("answer") >= 3
    assert events[0][1]["results"][0]["source_id"] == "kb-7"
    done = events[-1][1]
    assert done["status"] == "success" and done["metadata"]["model"] == "gemini-2.0-flash"
    assert done["answer"] == "Asset ingestion accepts WAV and FLAC files [1]."
    assert "".join(data["delta"] for name, data in events if name == "answer") == done["answer"]
    assert [s["citation_index"] for s in done["sources"]] == [1]
    assert done["confidence"]["level"] in ("high", "medium", "low")
    assert done["metadata"]["tokens_used"] == 64


def test_a_query_streams_results_synthesis_then_done(server: str, mock: respx.MockRouter) -> None:
    gemini = gemini_stream(["WAV ", "and FLAC [1]", " [5]."], pause=0.0)
    mock.post(url__regex=GEMINI_GENERATE).mock(return_value=streamed(gemini))
    body = {"query": QUESTION, "stream": True, "threshold": 0.2}
    with httpx.stream("POST", f"{server}/v1/knowledge/query", json=body) as response:
        events = list(server_sent_events(response.iter_lines()))
    names = [name for name, _ in events if name != "source_results"]
    assert names[0] == "results" and set(names[1:-1]) == {"synthesis"} and names[-1] == "done"
    fused = [name for name, _ in events].index("results")
    ahead = [data["source"] for name, data in events if name == "source_results"]
    assert all(name == "source_results" for name, _ in events[:fused])  # nothing after
    assert len(ahead) == fused and len(set(ahead)) == len(ahead)  # once per source at most
    assert set(ahead) <= set(SOURCE_TYPES)  # which have answered is timing: test_progressive
    done = events[-1][1]
    assert done["synthesis"] == "WAV and FLAC [1]."
    assert done["synthesizer"]["citations"] == [1]
    assert done["synthesizer"]["citations_removed"] == [5]
    assert done["metrics"]["cache_hit"] is False and done["metrics"]["synthesis_ms"] >= 0


def test_bad_input_is_a_status_before_any_event(server: str) -> None:
    response = httpx.post(f"{server}/v1/knowledge/answer", json={"query": "", "stream": True})
    assert response.status_code == 400
    assert response.json()["error"]["details"]["field"] == "query"


def test_a_client_that_leaves_stops_the_generation(server: str, mock: respx.MockRouter) -> None:
    gemini = gemini_stream([f"word{n} " for n in range(400)] + ["[1]."], pause=0.02)
    mock.post(url__regex=GEMINI_GENERATE).mock(return_value=streamed(gemini))
    groq = mock.post(GROQ_CHAT)
    body = {"query": QUESTION, "stream": True, "threshold": 0.2}
    with httpx.stream("POST", f"{server}/v1/knowledge/answer", json=body) as response:
        for name, _ in server_sent_events(response.iter_lines()):
            if name == "answer":
                break  # leave after the first words: closes the connection
    assert gemini.closed.wait(timeout=5), "the provider stream is still open"
    sent = gemini.sent
    assert sent < 400
    time.sleep(0.2)  # were the stream still read, more pieces would be sent by now
    assert gemini.sent == sent and not groq.called


def test_a_client_that_leaves_is_one_info_line(
    server: str, mock: respx.MockRouter, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    gemini = gemini_stream([f"word{n} " for n in range(400)] + ["[1]."], pause=0.02)
    mock.post(url__regex=GEMINI_GENERATE).mock(return_value=streamed(gemini))
    body = {"query": QUESTION, "stream": True, "threshold": 0.2}
    headers = {"X-Request-ID": "stream-1"}
    with httpx.stream("POST", f"{server}/v1/knowledge/answer", json=body, headers=headers) as r:
        assert r.headers["x-request-id"] == "stream-1"
        for name, _ in server_sent_events(r.iter_lines()):
            if name == "answer":
                break
    assert gemini.closed.wait(timeout=5)
    deadline = time.monotonic() + 30  # a guard against hanging only
    while not (lines := [r for r in caplog.records if r.name == "knowledge_api.access"]):
        assert time.monotonic() < deadline, "no access line"
        time.sleep(0.05)
    [line] = lines
    assert line.levelno == logging.INFO
    assert line.getMessage().startswith("POST /v1/knowledge/answer 200 ")
    assert line.getMessage().endswith("client disconnected before the end of the response")
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
