"""Chat clients as they are: the AI SDK's UI message stream and OpenAI chat completions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from knowledge_api.app import create_app
from knowledge_api.errors import InvalidRequest
from knowledge_api.routes import chat
from knowledge_api.usecases.references import MAX_TURNS
from tests.conftest import corpus, make_settings
from tests.providers import GEMINI_GENERATE, gemini_answer, llm_settings

QUESTION = "Which audio formats does asset ingestion accept?"
WEB_DOC = {
    "source_type": "wiki",
    "source_id": "https://wiki.example.com/audio",
    "content": "Asset ingestion accepts WAV and FLAC audio files.",
    "title": "Audio formats",
}


def ui_message(role: str, text: str) -> dict[str, Any]:
    return {"id": f"m-{role}-{len(text)}", "role": role, "parts": [{"type": "text", "text": text}]}


def ui_chunks(client: TestClient, body: dict[str, Any]) -> tuple[Any, list[Any]]:
    with client.stream("POST", "/v1/chat", json=body) as response:
        raw = "".join(response.iter_text())
    frames = [block.removeprefix("data: ") for block in raw.strip().split("\n\n")]
    assert frames[-1] == "[DONE]"
    return response, [json.loads(frame) for frame in frames[:-1]]


@pytest.fixture
def client(tmp_path: Path) -> Any:
    app = create_app(make_settings(tmp_path, answer_threshold="0.3"))
    with TestClient(app) as test_client:
        test_client.portal.call(app.state.service.ingest, corpus())
        test_client.post("/v1/knowledge/documents", json=WEB_DOC)
        yield test_client


def test_use_chat_reads_the_ui_message_stream(client: TestClient) -> None:
    body = {"id": "chat-1", "messages": [ui_message("user", QUESTION)], "trigger": "submit-message"}
    response, chunks = ui_chunks(client, {**body, "threshold": 0.0})
    assert response.headers["x-vercel-ai-ui-message-stream"] == "v1"
    assert response.headers["content-type"].startswith("text/event-stream")
    types = [chunk["type"] for chunk in chunks]
    assert types[:2] == ["start", "text-start"] and types[-1] == "finish"
    assert types.index("text-end") < types.index("finish")
    text = "".join(c["delta"] for c in chunks if c["type"] == "text-delta")
    assert "WAV and FLAC" in text and "[1]" in text
    sources = [c for c in chunks if c["type"] in ("source-url", "source-document")]
    assert sources and all(c["sourceId"].isdigit() for c in sources)
    assert any(c.get("url") == "https://wiki.example.com/audio" for c in sources)
    [meta] = [c for c in chunks if c["type"] == "message-metadata"]
    assert meta["messageMetadata"]["status"] == "success"


def test_a_short_follow_up_is_searched_with_the_question_before_it(client: TestClient) -> None:
    messages = [
        ui_message("user", "Which audio formats does asset ingestion accept?"),
        ui_message("assistant", "WAV and FLAC [1]."),
        ui_message("user", "and MP3?"),
    ]
    _, chunks = ui_chunks(client, {"messages": messages, "threshold": 0.0})
    text = "".join(c["delta"] for c in chunks if c["type"] == "text-delta")
    assert "MP3" in text or "FLAC" in text


def test_bad_chat_input_is_a_400_before_the_stream(client: TestClient) -> None:
    for body in ({"messages": []}, {"messages": [ui_message("assistant", "hi")]}, {"x": 1}):
        response = client.post("/v1/chat", json=body)
        assert response.status_code == 400, body


def test_openai_chat_completions(client: TestClient) -> None:
    body = {
        "model": "knowledge",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": QUESTION},
        ],
        "temperature": 0.2,  # OpenAI clients send fields of their own: ignored
    }
    completion = client.post("/v1/chat/completions", json=body).json()
    assert completion["object"] == "chat.completion" and completion["model"] == "knowledge"
    [choice] = completion["choices"]
    message = choice["message"]
    assert choice["finish_reason"] == "stop" and message["role"] == "assistant"
    assert "[1]" in message["content"] and "\n\nSources:\n[1] " in message["content"]
    spans = [(c["answer"]["start"], c["answer"]["end"]) for c in completion["citations"]]
    for annotation in message["annotations"]:
        citation = annotation["url_citation"]
        assert annotation["type"] == "url_citation" and citation["url"].startswith("https://")
        # the cited sentence through its last marker, as the citation's answer span
        marked = message["content"][citation["start_index"] : citation["end_index"]]
        assert marked.endswith("]") and not marked.startswith(("[", " "))
        assert (citation["start_index"], citation["end_index"]) in spans


def test_openai_streaming_chunks_end_with_done(tmp_path: Path) -> None:
    from contextlib import contextmanager

    from tests.providers import mocked

    with contextmanager(mocked)() as mock:
        mock.post(url__regex=GEMINI_GENERATE).mock(
            return_value=gemini_answer(["WAV and FLAC ", "are accepted [1]."])
        )
        settings = llm_settings(tmp_path, synthesizer="gemini,extractive", answer_threshold="0.3")
        app = create_app(settings)
        with TestClient(app) as client:
            client.portal.call(app.state.service.ingest, corpus())
            body = {"model": "default", "messages": [{"role": "user", "content": QUESTION}]}
            with client.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as r:
                raw = "".join(r.iter_text())
    frames = [block.removeprefix("data: ") for block in raw.strip().split("\n\n")]
    assert frames[-1] == "[DONE]"
    chunks = [json.loads(frame) for frame in frames[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    deltas = [c["choices"][0]["delta"].get("content", "") for c in chunks]
    said = "".join(deltas)
    assert said.startswith("WAV and FLAC are accepted [1].\n\nSources:\n[1] ")
    assert len([d for d in deltas[1:] if d]) >= 3  # streamed as the provider wrote it
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_an_agents_history_with_tool_calls_is_a_conversation(client: TestClient) -> None:
    """OpenAI's shape of a turn that called a tool: the assistant's `content` is null
    and a `tool` message answers it; both are part of the conversation, not a 400."""
    messages = [
        {"role": "system", "content": "Answer from the knowledge base."},
        {"role": "user", "content": "When is the 4.2 release?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "Friday."},
        {"role": "assistant", "content": "It moves to Friday."},
        {"role": "user", "content": "why does it move?"},
    ]
    body = {"model": "knowledge", "messages": messages, "threshold": 0.0}
    completion = client.post("/v1/chat/completions", json=body)
    assert completion.status_code == 200, completion.text
    assert "4.2" in completion.json()["rewrite"]["question"]
    bad = {**body, "messages": [{"role": "robot", "content": "hi"}, messages[1]]}
    refused = client.post("/v1/chat/completions", json=bad).json()["error"]
    assert refused["details"]["field"] == "messages[0].role"
    assert refused["details"]["rule"] == (
        "must be one of user, assistant, system, developer, tool, function"
    )


def test_a_nul_in_a_message_is_dropped_before_the_search(client: TestClient) -> None:
    """Postgres keeps no NUL in a text: the question made from the conversation has none."""
    body = {"messages": [{"role": "user", "content": "When is the 4.2\u0000 release?"}]}
    completion = client.post("/v1/chat/completions", json=body)
    assert completion.status_code == 200, completion.text
    assert completion.json()["rewrite"]["question"] == "When is the 4.2 release?"


def test_a_model_naming_no_collection_is_a_404_that_lists_them(client: TestClient) -> None:
    body = {"model": "defualt", "messages": [{"role": "user", "content": QUESTION}]}
    response = client.post("/v1/chat/completions", json=body)
    assert response.status_code == 404, response.text
    error = response.json()["error"]
    assert error["type"] == "collection_not_found" and "'defualt'" in error["message"]
    assert error["details"]["available"] == ["default"]


def long_chat(turns: int, words: int = 200) -> list[dict[str, Any]]:
    """A conversation of `turns` questions and answers (about 1.3 KB each), the latest
    asking QUESTION."""
    said = " ".join(["the gateway timeout was raised again"] * (words // 6))
    history: list[dict[str, Any]] = []
    for n in range(turns):
        history += [ui_message("user", f"{n}: {said}?"), ui_message("assistant", f"{said}.")]
    return [*history, ui_message("user", QUESTION)]


def test_a_long_chat_is_answered_on_both_routes_up_to_its_own_limit(tmp_path: Path) -> None:
    """A client resends the whole conversation: past 64 KiB (KNOWLEDGE_MAX_BODY_BYTES)
    it is still answered, from its latest turns, up to KNOWLEDGE_MAX_CHAT_BYTES."""
    settings = make_settings(tmp_path, answer_threshold="0.3", max_chat_bytes=400_000)
    messages = long_chat(60)
    openai = [{"role": m["role"], "content": m["parts"][0]["text"]} for m in messages]
    assert 200_000 > len(json.dumps(openai)) > 2 * settings.max_body_bytes
    with TestClient(create_app(settings)) as client:
        client.portal.call(client.app.state.service.ingest, corpus())  # type: ignore[attr-defined]
        response, chunks = ui_chunks(client, {"messages": messages, "threshold": 0.0})
        assert response.status_code == 200
        [meta] = [c for c in chunks if c["type"] == "message-metadata"]
        assert meta["messageMetadata"]["status"] == "success"
        completion = client.post("/v1/chat/completions", json={"messages": openai})
        assert completion.status_code == 200, completion.text
        assert completion.json()["choices"][0]["message"]["content"]
        too_long = long_chat(160)
        for path, body in (
            ("/v1/chat", {"messages": too_long}),
            ("/v1/chat/completions", {"messages": too_long}),
        ):
            refused = client.post(path, json=body)
            assert refused.status_code == 413, refused.text
            assert refused.json()["error"]["details"]["limit"] == 400_000
        other = client.post("/v1/knowledge/query", json={"query": "x" * 70_000})
        assert other.status_code == 413  # the other routes keep KNOWLEDGE_MAX_BODY_BYTES


def test_only_the_turns_a_question_is_made_from_are_read() -> None:
    """Each message is checked, but only the latest MAX_TURNS + 1 questions (and the
    answers between them) are read into turns."""
    messages = long_chat(30)
    read = chat.turns(messages)
    questions = [turn for turn in read if turn.role == "user"]
    assert len(questions) == MAX_TURNS + 1 and questions[-1].text == QUESTION
    assert questions[0].text.startswith(f"{30 - MAX_TURNS}: ")
    assert read[0] == questions[0] and len(read) == 2 * MAX_TURNS + 1
    short = messages[-3:]
    assert [turn.text for turn in chat.turns(short)] == [m["parts"][0]["text"] for m in short]
    broken = [{"role": "robot", "content": "hi"}, *messages]
    with pytest.raises(InvalidRequest, match=r"messages\[0\]\.role"):
        chat.turns(broken)  # an old message is still checked
