"""Every answer route returns the words behind each citation: spans that slice the
stored document, the passage and the answer exactly, in code points or UTF-16 code
units as the route counts them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import respx
from starlette.testclient import TestClient

from knowledge_api.app import create_app
from knowledge_api.models import Document
from knowledge_api.settings import Settings
from tests.conftest import make_settings
from tests.providers import GEMINI_GENERATE, gemini_answer, llm_settings
from tests.test_mcp import connected, load, serving, text_of

URL = "https://wiki.example.com/cache"
CONTENT = (
    "# Cache 🎉\r\n\r\nThe café cache 🎉 keeps Tier-2 entries for 24\thours, e\u0301clair.\r\n"
    "Deploys of the cache run at 09:00 UTC,\tevery day.\r\n\r\n日本語のテキストです。\r\n"
)
DOCUMENT = {"source_type": "wiki", "source_id": URL, "title": "Cache 🎉", "content": CONTENT}
QUESTION = "How long does the café cache keep Tier-2 entries?"
QUOTE = "The café cache 🎉 keeps Tier-2 entries for 24\thours, e\u0301clair."


def in_units(text: str, span: dict[str, int], unit: str) -> str:
    """text[start:end], the offsets counted in `unit`."""
    if unit == "utf16":
        return text.encode("utf-16-le")[2 * span["start"] : 2 * span["end"]].decode("utf-16-le")
    return text[span["start"] : span["end"]]


def check(
    citations: list[dict[str, Any]],
    answer: str,
    passages: list[str],
    client: TestClient,
    unit: str,
) -> None:
    """Each citation's quote is its document's stored text at `document`, reads at
    `passage` in passage n, and `answer` slices the cited sentence through its marker."""
    assert citations
    for citation in citations:
        stored = client.get(f"/v1/knowledge/documents/{citation['document_id']}").json()
        assert in_units(stored["content"], citation["document"], unit) == citation["quote"]
        passage = in_units(passages[citation["n"] - 1], citation["passage"], unit)
        assert passage.split() == citation["quote"].split()
        cited = in_units(answer, citation["answer"], unit)
        assert cited.endswith(f"[{citation['n']}]") and cited.strip() == cited


def serve(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as client:
        assert client.post("/v1/knowledge/documents", json=DOCUMENT).status_code == 201
        yield client


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    yield from serve(make_settings(tmp_path, answer_threshold="0.1"))


@pytest.mark.parametrize("unit", ["codepoints", "utf16"])
def test_query_synthesis_citations_slice_in_either_unit(client: TestClient, unit: str) -> None:
    asked = {"query": QUESTION, "threshold": 0}
    body = client.post("/v1/knowledge/query", json={**asked, "offsets": unit}).json()
    assert body["synthesis"].startswith(QUOTE.replace("\t", " "))
    contents = [result["content"] for result in body["results"]]
    check(body["citations"], body["synthesis"], contents, client, unit)
    assert body["citations"][0]["quote"] == QUOTE  # the stored text, its tab included
    counted = client.post("/v1/knowledge/query", json=asked).json()["citations"][0]
    units = {  # code points by default; the same places counted in UTF-16 on request
        edge: len(CONTENT[: counted["document"][edge]].encode("utf-16-le")) // 2
        for edge in ("start", "end")
    }
    expected = units if unit == "utf16" else counted["document"]
    assert body["citations"][0]["document"] == expected
    assert units["end"] == counted["document"]["end"] + 2  # two emoji before the end


def test_answer_and_its_stream_carry_citations(client: TestClient) -> None:
    body = client.post("/v1/knowledge/answer", json={"query": QUESTION}).json()
    assert body["status"] == "success"
    full = client.post("/v1/knowledge/query", json={"query": QUESTION, "threshold": 0}).json()
    check(body["citations"], body["answer"], [full["results"][0]["content"]], client, "codepoints")

    streamed = {"query": QUESTION, "stream": True, "offsets": "utf16"}
    with client.stream("POST", "/v1/knowledge/answer", json=streamed) as response:
        done = last_event(response.iter_text())
    assert done["answer"] == body["answer"]
    check(done["citations"], done["answer"], [full["results"][0]["content"]], client, "utf16")

    asked = {"query": QUESTION, "threshold": 0, "stream": True}
    with client.stream("POST", "/v1/knowledge/query", json=asked) as response:
        done = last_event(response.iter_text())
    assert done["citations"] == full["citations"]


def last_event(pieces: Iterator[str]) -> dict[str, Any]:
    raw = "".join(pieces)
    blocks = [block for block in raw.strip().split("\n\n") if block.startswith("event: done")]
    data = blocks[-1].split("\ndata: ", 1)[1]
    found: dict[str, Any] = json.loads(data)
    return found


def test_ai_sdk_source_parts_carry_their_citations_in_utf16(client: TestClient) -> None:
    message = {"id": "m1", "role": "user", "parts": [{"type": "text", "text": QUESTION}]}
    with client.stream("POST", "/v1/chat", json={"messages": [message]}) as response:
        raw = "".join(response.iter_text())
    frames = [block.removeprefix("data: ") for block in raw.strip().split("\n\n")][:-1]
    parts = [json.loads(frame) for frame in frames]
    said = "".join(part["delta"] for part in parts if part["type"] == "text-delta")
    (source,) = [part for part in parts if part["type"] == "source-url"]
    citations = source["providerMetadata"]["knowledge"]["citations"]
    assert {c["n"] for c in citations} == {int(source["sourceId"])}
    full = client.post("/v1/knowledge/query", json={"query": QUESTION, "threshold": 0}).json()
    check(citations, said, [full["results"][0]["content"]], client, "utf16")


@pytest.mark.parametrize("stream", [False, True])
def test_openai_annotations_cover_each_cited_sentence(client: TestClient, stream: bool) -> None:
    body = {"model": "knowledge", "messages": [{"role": "user", "content": QUESTION}]}
    if not stream:
        completion = client.post("/v1/chat/completions", json=body).json()
        message = completion["choices"][0]["message"]
        content, citations = message["content"], completion["citations"]
        annotations = message["annotations"]
    else:
        with client.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as r:
            raw = "".join(r.iter_text())
        frames = [block.removeprefix("data: ") for block in raw.strip().split("\n\n")][:-1]
        chunks = [json.loads(frame) for frame in frames]
        content = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
        citations = chunks[-1]["citations"]
        annotations = next(
            c["choices"][0]["delta"]["annotations"]
            for c in chunks
            if "annotations" in c["choices"][0]["delta"]
        )
    full = client.post("/v1/knowledge/query", json={"query": QUESTION, "threshold": 0}).json()
    check(citations, content, [full["results"][0]["content"]], client, "utf16")
    assert [
        (a["url_citation"]["start_index"], a["url_citation"]["end_index"]) for a in annotations
    ] == [(c["answer"]["start"], c["answer"]["end"]) for c in citations]
    assert all(a["url_citation"]["url"] == URL for a in annotations)

    counted = client.post("/v1/chat/completions", json={**body, "offsets": "codepoints"}).json()
    check(counted["citations"], counted["choices"][0]["message"]["content"],
          [full["results"][0]["content"]], client, "codepoints")  # fmt: skip


def test_a_written_answer_quotes_the_stored_sentence_it_draws_from(
    tmp_path: Path, mock: respx.MockRouter
) -> None:
    written = [
        "Tier-2 entries are kept by the café cache 🎉 ",
        "for 24 hours [1]. Bananas are ripe [1].",
    ]
    mock.post(url__regex=GEMINI_GENERATE).mock(return_value=gemini_answer(written))
    settings = llm_settings(tmp_path, synthesizer="gemini,extractive", answer_threshold="0.1")
    for client in serve(settings):
        body = client.post("/v1/knowledge/answer", json={"query": QUESTION}).json()
        assert body["answer"] == "".join(written)
        supported, unsupported = body["citations"]
        assert supported["quote"] == QUOTE
        full = client.post("/v1/knowledge/query", json={"query": QUESTION, "threshold": 0}).json()
        check([supported], body["answer"], [full["results"][0]["content"]], client, "codepoints")
        assert unsupported["unsupported"] is True and unsupported["quote"] is None
        assert (
            in_units(body["answer"], unsupported["answer"], "codepoints") == "Bananas are ripe [1]"
        )


def test_an_offsets_unit_outside_the_two_is_refused(client: TestClient) -> None:
    refused = client.post("/v1/knowledge/query", json={"query": QUESTION, "offsets": "bytes"})
    assert refused.status_code == 400
    assert refused.json()["error"]["details"]["field"] == "offsets"
    chat = {"model": "knowledge", "messages": [{"role": "user", "content": QUESTION}]}
    refused = client.post("/v1/chat/completions", json={**chat, "offsets": "bytes"})
    assert refused.status_code == 400


def test_document_views_show_chunk_offsets_in_the_unit_asked(client: TestClient) -> None:
    found = client.post("/v1/knowledge/query", json={"query": QUESTION, "synthesize": False})
    document_id = found.json()["results"][0]["metadata"]["document_id"]
    for unit in ("codepoints", "utf16"):
        stored = client.get(f"/v1/knowledge/documents/{document_id}?offsets={unit}").json()
        detail = client.get(f"/v1/knowledge/detail/wiki/{URL}?offsets={unit}").json()
        assert detail["chunks"] == stored["chunks"]
        for chunk in stored["chunks"]:
            there = in_units(stored["content"], chunk, unit)
            assert there.split() == chunk["content"].split()


async def test_the_mcp_answer_tool_returns_citations(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, answer_threshold="0.1")
    await load(settings, [Document(**DOCUMENT)])
    async with serving(settings) as app, connected(app) as client:
        answered = await client.call_tool("answer", {"query": QUESTION, "offsets": "utf16"})
        assert not answered.is_error, text_of(answered)
        body = json.loads(text_of(answered))
        refused = await client.call_tool("answer", {"query": QUESTION, "offsets": "bytes"})
        assert refused.is_error and "offsets" in text_of(refused)
    (citation,) = body["citations"]
    assert citation["quote"] == QUOTE
    assert in_units(body["answer"], citation["answer"], "utf16").endswith("[1]")
    assert in_units(CONTENT, citation["document"], "utf16") == QUOTE
