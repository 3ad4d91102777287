"""Follow-ups made standalone: references resolved one and two turns back, the sources
an earlier answer cited searched with them, the LLM rewrite (cached, under a deadline,
falling back visibly), and the rewrite shown by every chat route."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx
from starlette.testclient import TestClient

import knowledge_api
from knowledge_api.app import create_app
from knowledge_api.ingest.loaders import LoadOptions, load_paths
from knowledge_api.ingest.pipeline import chunked
from knowledge_api.usecases.conversation import Rewrite, offline
from knowledge_api.usecases.references import Turn
from tests.conftest import corpus, ingested_client, make_settings
from tests.providers import (
    GEMINI_GENERATE,
    Stream,
    gemini_answer,
    gemini_chunk,
    gemini_error,
    llm_settings,
    streamed,
)
from tests.test_access import bearer, make_key
from tests.test_mcp import connected, load, serving, text_of

REWRITE_PROMPT = b"standalone search question"
CONVERSATIONS = Path(__file__).parent / "conversations.json"


def said(*turns: str | tuple[str, tuple[str, ...]]) -> list[Turn]:
    """User turns as strings; assistant turns as (text, cited titles)."""
    return [Turn("user", t) if isinstance(t, str) else Turn("assistant", t[0], t[1]) for t in turns]


def rewritten(*questions: str) -> Rewrite:
    """The offline rewrite of the last of `questions`, each earlier one answered with
    nothing cited."""
    turns: list[str | tuple[str, tuple[str, ...]]] = []
    for question in questions[:-1]:
        turns += [question, ("..", ())]
    return offline(said(*turns, questions[-1]))


# -- offline ---------------------------------------------------------------------------


def test_a_pronoun_is_the_subject_one_turn_back() -> None:
    rewrite = offline(
        said("What is Falcon?", ("Falcon is a gateway [1].", ()), "How is it set up?")
    )
    assert rewrite.by == "offline"
    assert rewrite.question == "How is Falcon set up?"


def test_the_first_one_is_the_subject_two_turns_back() -> None:
    rewrite = offline(
        said(
            "How is Gemini configured?",
            ("With a key [1].", ()),
            "And Groq?",
            ("Also with a key [1].", ()),
            "What model does the first one use?",
        )
    )
    assert "Gemini" in rewrite.question and "Groq" not in rewrite.question
    latter = rewritten("Tell me about Gemini", "And Groq?", "What model does the latter use?")
    assert "Groq" in latter.question and "Gemini" not in latter.question


def test_a_pronoun_follows_the_subject_through_two_turns() -> None:
    rewrite = rewritten("What is Falcon?", "How is it set up?", "Does it stream?")
    assert rewrite.question == "Does Falcon stream?"


def test_and_x_asks_the_previous_question_about_x() -> None:
    rewrite = rewritten("How do I configure the Chroma store?", "And Qdrant?")
    assert rewrite.question == "How do I configure the Qdrant store?"
    kept = rewritten(
        "What is the Postgres store?", "What tables does it use?", "And which SQL functions?"
    )
    assert kept.question == "What SQL functions does Postgres use?"


def test_and_a_name_replaces_the_entity_asked_about_not_the_focus() -> None:
    """ "and Kestrel?" asks the previous question of Kestrel: the name takes the
    subject's place (with its article), never the place of what was asked of it."""
    rolled = rewritten("How do I roll back an Osprey wave?", "and Kestrel?")
    assert rolled.question == "How do I roll back a Kestrel wave?"
    after_a_bare_question = offline(
        said(
            "How do I roll back an Osprey wave?",
            ("..", ("Osprey > Rolling back",)),
            "What does the cache of your last answer say?",
            ("..", ("Osprey > Cache",)),
            "and Kestrel?",
        )
    )
    assert "Kestrel" in after_a_bare_question.question
    assert "cache of your last answer" in after_a_bare_question.question
    assert after_a_bare_question.cited == ()  # Osprey's documents are not Kestrel's
    moved = rewritten(
        "How do I configure the Chroma store?",
        "How are its collections laid out?",
        "what about Qdrant?",
    )
    assert moved.question == "How are Qdrant collections laid out?"


def test_and_a_thing_of_the_same_entity_keeps_the_entity() -> None:
    """ "and the errors?" after a question on PM2 asks it of PM2: the entity stays, the
    thing asked of it gives way; a name with a common noun ("the Qdrant store") puts the
    name in the entity's place, and "and what about X?" is one opening."""
    cited = ("Operations guide > Running under PM2",)
    errors = offline(said("Where does PM2 write the warnings?", ("..", cited), "and the errors?"))
    assert errors.question == "Where does PM2 write the errors?"
    assert errors.cited == ("Operations guide",)
    used = rewritten("What does useChat send in the request?", "What about the errors?")
    assert used.question == "What does useChat send in the errors?"
    route = rewritten("How does the Python client stream?", "And the answer route?")
    assert "answer route" in route.question and "Python" not in route.question  # another entity
    store = rewritten("How do I configure the Chroma store?", "and the Qdrant store?")
    assert store.question == "How do I configure the Qdrant store?"
    port = rewritten("Which port does Falcon listen on?", "And what about Osprey?")
    assert port.question == "Which port does Osprey listen on?"


def test_the_sources_an_earlier_answer_cited_are_searched_with_the_question() -> None:
    cited = ("Falcon guide > Setup", "Gateways > Falcon")
    rewrite = offline(said("What is Falcon?", ("A gateway [1][2].", cited), "How is it set up?"))
    assert rewrite.cited == ("Falcon guide", "Gateways")
    assert rewrite.searched == "How is Falcon set up? Falcon guide Gateways"
    second = offline(
        said("What is Falcon?", ("A gateway [1][2].", cited), "Show the second source")
    )
    assert second.question == "Show Gateways > Falcon"


def test_a_question_of_its_own_is_left_alone_and_a_bare_one_gets_the_subject() -> None:
    history = ("What is Falcon?", ("A gateway [1].", ("Falcon guide > Setup",)))
    own = offline(said(*history, "How does the Qdrant store filter results?"))
    assert own.question == "How does the Qdrant store filter results?" and own.cited == ()
    bare = offline(said(*history, "What are the defaults?"))
    assert bare.question == "What are the defaults (Falcon)?"


def test_a_rewrite_is_not_the_turns_joined() -> None:
    first = "Which audio formats does asset ingestion accept, and which are converted?"
    rewrite = offline(said(first, ("WAV and FLAC [1].", ()), "How long does it take?"))
    assert first not in rewrite.searched
    assert offline(said(first)).by == "none" and offline(said(first)).question == first


# -- the routes ------------------------------------------------------------------------


def ui_message(role: str, text: str, sources: tuple[str, ...] = ()) -> dict[str, Any]:
    parts: list[dict[str, Any]] = [{"type": "text", "text": text}]
    parts += [
        {"type": "source-document", "sourceId": str(n), "mediaType": "text/plain", "title": t}
        for n, t in enumerate(sources, start=1)
    ]
    return {"id": f"m-{role}-{len(text)}", "role": role, "parts": parts}


def ui_metadata(client: TestClient, messages: list[dict[str, Any]]) -> dict[str, Any]:
    with client.stream("POST", "/v1/chat", json={"messages": messages, "threshold": 0.0}) as r:
        assert r.status_code == 200
        raw = "".join(r.iter_text())
    frames = [json.loads(b.removeprefix("data: ")) for b in raw.strip().split("\n\n")[:-1]]
    [meta] = [f["messageMetadata"] for f in frames if f["type"] == "message-metadata"]
    return dict(meta)


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    yield from ingested_client(make_settings(tmp_path, answer_threshold="0.3"), corpus())


CONVERSATION = [
    ("user", "Which audio formats does asset ingestion accept?"),
    ("assistant", "WAV and FLAC [1]."),
    ("user", "Is MP3 converted by it?"),
]


def test_the_ai_sdk_route_shows_the_rewrite_and_reads_its_source_parts(
    client: TestClient,
) -> None:
    messages = [
        ui_message("user", CONVERSATION[0][1]),
        ui_message("assistant", CONVERSATION[1][1], ("Supported audio formats",)),
        ui_message("user", CONVERSATION[2][1]),
    ]
    rewrite = ui_metadata(client, messages)["rewrite"]
    assert rewrite["by"] == "offline"
    assert rewrite["question"] == "Is MP3 converted by asset ingestion?"
    assert rewrite["cited_sources"] == ["Supported audio formats"]
    first = ui_metadata(client, messages[:1])["rewrite"]
    assert first["by"] == "none" and first["question"] == CONVERSATION[0][1]


def test_the_openai_route_shows_the_rewrite_and_reads_the_sources_under_an_answer(
    client: TestClient,
) -> None:
    answer = "WAV and FLAC [1].\n\nSources:\n[1] Supported audio formats (https://kb.example/7)"
    messages = [
        {"role": "user", "content": CONVERSATION[0][1]},
        {"role": "assistant", "content": answer},
        {"role": "user", "content": CONVERSATION[2][1]},
    ]
    body = client.post("/v1/chat/completions", json={"model": "knowledge", "messages": messages})
    assert body.status_code == 200
    rewrite = body.json()["rewrite"]
    assert rewrite["question"] == "Is MP3 converted by asset ingestion?"
    assert rewrite["cited_sources"] == ["Supported audio formats"]
    payload = {"model": "knowledge", "messages": messages, "stream": True}
    with client.stream("POST", "/v1/chat/completions", json=payload) as response:
        raw = "".join(response.iter_text())
    chunks = [json.loads(b.removeprefix("data: ")) for b in raw.strip().split("\n\n")[:-1]]
    [last] = [c for c in chunks if c["choices"][0]["finish_reason"] == "stop"]
    assert last["rewrite"]["question"] == rewrite["question"]


def test_openapi_declares_the_rewrite_of_a_completion(client: TestClient) -> None:
    operation = client.get("/openapi.json").json()["paths"]["/v1/chat/completions"]["post"]
    schema = operation["responses"]["200"]["content"]["application/json"]["schema"]
    assert "rewrite" in schema["required"]
    declared = schema["properties"]["rewrite"]["properties"]
    assert set(declared) == set(Rewrite("q", "offline").view())


def test_a_malformed_earlier_message_is_a_400_naming_it(client: TestClient) -> None:
    messages = [{"role": "robot", "content": "hi"}, {"role": "user", "content": "and it?"}]
    response = client.post("/v1/chat/completions", json={"messages": messages})
    assert response.status_code == 400
    assert "messages[0].role" in response.text


async def test_the_mcp_answer_tool_rewrites_with_a_history(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, answer_threshold="0.0")
    await load(settings)
    history = [
        {"role": "user", "content": CONVERSATION[0][1]},
        {
            "role": "assistant",
            "content": "WAV and FLAC [1].\n\nSources:\n[1] Supported audio formats",
        },
    ]
    async with serving(settings) as app, connected(app) as client:
        result = await client.call_tool("answer", {"query": CONVERSATION[2][1], "history": history})
        assert not result.is_error, text_of(result)
        rewrite = json.loads(text_of(result))["rewrite"]
        assert rewrite["question"] == "Is MP3 converted by asset ingestion?"
        assert rewrite["cited_sources"] == ["Supported audio formats"]
        alone = json.loads(text_of(await client.call_tool("answer", {"query": "MP3?"})))
        assert "rewrite" not in alone
        bad = await client.call_tool("answer", {"query": "and it?", "history": [{"role": 1}]})
        assert bad.is_error and "history[0].role" in text_of(bad)


# -- with an LLM link --------------------------------------------------------------------


@pytest.fixture
def gemini() -> Iterator[respx.MockRouter]:
    with respx.mock(assert_all_called=False, assert_all_mocked=True) as router:
        yield router


def answering(rewrite: Any) -> Any:
    """Gemini's side: `rewrite` answers a rewrite prompt; an answer prompt gets an answer."""
    calls: list[bytes] = []
    answers: list[str] = []

    def reply(request: httpx.Request) -> httpx.Response:
        if REWRITE_PROMPT in request.content:
            calls.append(request.content)
            return rewrite() if callable(rewrite) else rewrite
        answers.append(json.loads(request.content)["contents"][0]["parts"][0]["text"])
        return gemini_answer(["MP3 uploads are converted to FLAC [1]."])

    reply.calls = calls  # type: ignore[attr-defined]
    reply.answers = answers  # type: ignore[attr-defined]
    return reply


def llm_client(tmp_path: Path, **changes: Any) -> TestClient:
    """The rewrite may take 30 s unless `changes` say otherwise: on a loaded machine the
    2 s default was a race for "by gemini" (the late rewrite's test sets its own)."""
    settings = llm_settings(
        tmp_path, answer_threshold="0.0", synthesizer="gemini,extractive", rewrite_timeout=30.0
    )
    return TestClient(create_app(settings.replace(**changes)))


def completions(client: TestClient) -> dict[str, Any]:
    answer = "WAV and FLAC [1].\n\nSources:\n[1] Supported audio formats"
    messages = [
        {"role": "user", "content": CONVERSATION[0][1]},
        {"role": "assistant", "content": answer},
        {"role": "user", "content": CONVERSATION[2][1]},
    ]
    response = client.post("/v1/chat/completions", json={"messages": messages})
    assert response.status_code == 200, response.text
    rewrite: dict[str, Any] = response.json()["rewrite"]
    return rewrite


def test_the_llm_rewrites_once_and_the_rewrite_is_cached(
    tmp_path: Path, gemini: respx.MockRouter
) -> None:
    reply = answering(gemini_answer(["Does asset ingestion convert MP3 uploads?\n"]))
    gemini.post(url__regex=GEMINI_GENERATE).mock(side_effect=reply)
    with llm_client(tmp_path) as client:
        client.portal.call(client.app.state.service.ingest, corpus())  # type: ignore[attr-defined]
        rewrite = completions(client)
        assert rewrite["by"] == "gemini" and rewrite["fallback"] is None
        assert rewrite["question"] == "Does asset ingestion convert MP3 uploads?"
        assert rewrite["cache_hit"] is False
        [prompt] = reply.calls
        text = json.loads(prompt)["contents"][0]["parts"][0]["text"]
        assert "USER: Is MP3 converted by it?" in text
        assert "(sources: Supported audio formats)" in text
        again = completions(client)
        assert again["cache_hit"] is True and again["question"] == rewrite["question"]
        assert len(reply.calls) == 1


def test_a_late_llm_rewrite_falls_back_to_the_offline_one_and_says_so(
    tmp_path: Path, gemini: respx.MockRouter
) -> None:
    stalled = Stream([gemini_chunk("Does asset")], then="stall", stall=5.0)
    reply = answering(lambda: streamed(stalled))
    gemini.post(url__regex=GEMINI_GENERATE).mock(side_effect=reply)
    with llm_client(tmp_path, rewrite_timeout=0.2) as client:
        rewrite = completions(client)
        assert rewrite["by"] == "offline"
        assert rewrite["question"] == "Is MP3 converted by asset ingestion?"
        assert rewrite["fallback"] == "gemini: no rewrite within 0.2 s"
        completions(client)  # a fallback is not cached: the link is asked again
        assert len(reply.calls) == 2


def test_a_failing_llm_rewrite_falls_back_and_names_the_error(
    tmp_path: Path, gemini: respx.MockRouter
) -> None:
    reply = answering(gemini_error(500, "overloaded"))
    gemini.post(url__regex=GEMINI_GENERATE).mock(side_effect=reply)
    with llm_client(tmp_path) as client:
        client.portal.call(client.app.state.service.ingest, corpus())  # type: ignore[attr-defined]
        rewrite = completions(client)
        assert rewrite["by"] == "offline"
        assert rewrite["fallback"].startswith("gemini: HTTP 500")
        assert "overloaded" in rewrite["fallback"]
        assert rewrite["cited_sources"] == ["Supported audio formats"]
        # the cited documents are searched with the question; the answer is to the question
        [prompt] = reply.answers
        assert "USER QUESTION: Is MP3 converted by asset ingestion?\n" in prompt


# -- the evaluation set ------------------------------------------------------------------


def test_every_follow_up_of_the_evaluation_set_names_a_passage_of_the_bundled_docs() -> None:
    """scripts/conversation_eval.py scores against these: a renamed section must fail here."""
    docs = chunked(
        load_paths([Path(knowledge_api.__file__).parent / "docs"], LoadOptions()).documents
    )
    passages = {(doc.source_id, chunk.section) for doc in docs for chunk in doc.chunks}
    conversations = json.loads(CONVERSATIONS.read_text())["conversations"]
    assert len(conversations) >= 40
    follow_ups = [t for c in conversations for t in c["turns"] if "standalone" in t]
    assert {t["refers"] for t in follow_ups} == {1, 2}
    missing = [
        t["passage"]
        for c in conversations
        for t in c["turns"]
        if tuple(t["passage"]) not in passages
    ]
    assert missing == []
    assert all(t["standalone"] != t["ask"] for t in follow_ups)


def test_a_long_message_is_searched_by_its_end_and_the_cited_documents_fit_after_it() -> None:
    long = "word " * 150 + "How is it set up?"
    rewrite = offline(said("What is Falcon?", ("..", ("Falcon guide > Setup",)), long))
    assert rewrite.question.endswith("How is Falcon set up?") and len(rewrite.question) == 500
    assert len(rewrite.searched) == 500 and rewrite.searched.endswith("set up?")
    short = offline(said("What is Falcon?", ("..", ("Falcon guide > Setup",)), "Is it fast?"))
    assert short.searched == "Is Falcon fast? Falcon guide"


async def test_a_caller_refused_the_collection_costs_no_llm_rewrite(
    tmp_path: Path, gemini: respx.MockRouter
) -> None:
    reply = answering(gemini_answer(["Does asset ingestion convert MP3 uploads?"]))
    gemini.post(url__regex=GEMINI_GENERATE).mock(side_effect=reply)
    settings = llm_settings(tmp_path, auth="keys", synthesizer="gemini,extractive")
    token = await make_key(settings, "team", ["read"], ("other",))
    messages = [
        {"role": "user", "content": CONVERSATION[0][1]},
        {"role": "assistant", "content": "WAV and FLAC [1]."},
        {"role": "user", "content": CONVERSATION[2][1]},
    ]
    async with serving(settings) as app:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as http:
            response = await http.post(
                "/v1/chat/completions", json={"messages": messages}, headers=bearer(token)
            )
    assert response.status_code == 403
    assert reply.calls == []
