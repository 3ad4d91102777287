"""The playground in a real browser: the system Chromium, driven by Playwright, against
the service as `knowledge-api serve` runs it (uvicorn on a free port, SQLite seeded with
two of the bundled docs, the real MiniLM model, keys required). Gemini writes the answer
through its SDK, its HTTP side answered by respx, piece by piece so the answer can be
seen growing.

Without Chromium or playwright the tests are skipped, saying how to install them.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx

import knowledge_api
from knowledge_api.app import create_app
from knowledge_api.models import SOURCE_TYPES
from tests import providers
from tests.conftest import seeded_at
from tests.loopback import serving_app
from tests.providers import (
    GEMINI_GENERATE,
    GROQ_CHAT,
    Stream,
    gemini_chunk,
    groq_answer,
    llm_settings,
    streamed,
)
from tests.test_access import make_key

pytestmark = [pytest.mark.browser, pytest.mark.model]

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
if CHROMIUM is None:
    pytest.skip(
        "no Chromium to drive: install it (`apt-get install chromium`) to run the "
        "playground's browser tests",
        allow_module_level=True,
    )
sync_api = pytest.importorskip(
    "playwright.sync_api",
    reason="playwright is not installed: `pip install playwright` (the dev extra) to run "
    "the playground's browser tests (no `playwright install`: the system Chromium is used)",
)

DOCS = Path(knowledge_api.__file__).parent / "docs"
SEED = ("overview.md", "api.md")
QUESTION = "How is a query answered?"
PIECES = [
    "A query is normalised and looked up in the response cache [1]. ",
    "On a miss it is embedded, ",
    "searched by meaning and by keyword, ",
    "and the two rankings are fused [2].",
]
ANSWER = "".join(PIECES)
BREAKS = "outage"
QUOTES = "verbatim"
QUOTED = (
    "The normalised text, together with `sources`, `limit`, `threshold`, `synthesize` and "
    "`filters`, is the cache key [1]. Bananas are yellow [1]."
)
"""Gemini's answer to a question with QUOTES in it: a sentence of overview.md as it
reads (but for its Markdown), then one no passage supports."""
GROQ_PIECES = ["Groq writes this: ", "results are fused [1]."]
TIMEOUT_MS = 20_000
DONE = """() => document.querySelector('#answer').getAttribute('aria-busy') === 'false'
  && (document.querySelector('#badges li') || !document.querySelector('#error').hidden
      || !document.querySelector('#filters-error').hidden)"""
"""The stream has ended: the metrics or an error (of the request or of its filter) are
shown. A function, not a bare expression: Playwright evaluates those with eval, which
the page's policy refuses."""


@pytest.fixture(scope="module")
def gemini() -> Iterator[respx.MockRouter]:
    """Gemini answers every question with PIECES, one every 150 ms, but breaks after its
    first piece on a question with BREAKS in it; then Groq answers."""
    chunks = [gemini_chunk(p) for p in PIECES[:-1]] + [gemini_chunk(PIECES[-1], "STOP", 42)]

    def answer(request: httpx.Request) -> httpx.Response:
        if BREAKS.encode() in request.content:
            return streamed(Stream(chunks[:1], then="break"))
        if QUOTES.encode() in request.content:
            return streamed(Stream([gemini_chunk(QUOTED, "STOP", 42)]))
        return streamed(Stream(chunks, pause=0.15))

    for router in providers.mocked():
        router.post(url__regex=GEMINI_GENERATE).mock(side_effect=answer)
        router.post(GROQ_CHAT).mock(return_value=groq_answer(GROQ_PIECES))
        yield router


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, gemini: respx.MockRouter) -> Iterator[Any]:
    """The service on a free loopback port, keys required: its URL, a read key and a
    write key."""
    folder: Path = tmp_path_factory.mktemp("playground")
    seed = folder / "docs"
    seed.mkdir()
    for name in SEED:  # two of the bundled docs: seeding them all takes a minute here
        shutil.copy(DOCS / name, seed / name)
    settings = llm_settings(
        folder, embedder="local", seed_on_empty=True, seed_path=str(seed), auth="keys"
    )
    token = asyncio.run(make_key(settings, "playground", ["read"]))
    writer = asyncio.run(make_key(settings, "writer", ["write"]))
    # the model loads and the docs are embedded before the startup ends
    with serving_app(create_app(settings), start_seconds=180) as url:
        seeded_at(url, token)
        yield url, token, writer


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        yield browser
        browser.close()


class Playground:
    """One tab on the page, with what its console said."""

    def __init__(self, page: Any, url: str) -> None:
        self.page = page
        self.url = url
        self.console: list[str] = []
        self.crashes: list[str] = []
        page.on("console", lambda m: self.console.append(f"{m.type}: {m.text}"))
        page.on("pageerror", lambda e: self.crashes.append(str(e)))
        page.set_default_timeout(TIMEOUT_MS)
        page.goto(url + "/")

    def enter_key(self, token: str) -> None:
        self.page.fill("#api-key", token)

    def ask(self, question: str = QUESTION) -> None:
        self.page.fill("#question", question)
        self.page.press("#question", "Enter")

    def answered(self) -> None:
        """Wait until the stream has ended and the metrics are shown (or an error)."""
        self.page.wait_for_function(DONE)

    def watch_answer(self) -> None:
        """Record the answer's text after each change (an observer's callback runs
        before the page handles the next event)."""
        self.page.evaluate(
            """() => {
              window.answerSeen = [];
              const answer = document.querySelector('#answer');
              new MutationObserver(() => window.answerSeen.push(answer.textContent))
                .observe(answer, {childList: true, subtree: true, characterData: true});
            }"""
        )

    def answer_seen(self) -> list[str]:
        seen: list[str] = self.page.evaluate("window.answerSeen")
        return seen

    def texts(self, selector: str) -> list[str]:
        found: list[str] = self.page.locator(selector).all_inner_texts()
        return found

    def policy_violations(self) -> list[str]:
        return [line for line in self.console if "Content Security Policy" in line]


@pytest.fixture
def tab(server: Any, chromium: Any) -> Iterator[Playground]:
    """A fresh tab (its own sessionStorage), the window small enough that results sit
    below the fold. (The server first: Playwright's sync API runs an event loop in
    this thread, and the server's key is made with asyncio.run.)"""
    context = chromium.new_context(viewport={"width": 900, "height": 600})
    yield Playground(context.new_page(), server[0])
    context.close()


def test_without_a_key_the_401_is_readable_and_with_the_key_the_query_succeeds(
    tab: Playground, server: Any
) -> None:
    tab.ask()
    error = tab.page.locator("#error")
    error.wait_for(state="visible")
    assert "401 unauthorized: an API key is required" in error.inner_text()
    assert "Enter an API key in the API key field" in error.inner_text()
    assert tab.texts("#results li") == []

    token = server[1]
    tab.enter_key(token)
    with tab.page.expect_request(re.compile(r"/v1/knowledge/query$")) as sent:
        tab.ask()
    assert sent.value.headers["authorization"] == f"Bearer {token}"
    tab.answered()
    assert error.is_hidden()
    assert len(tab.texts("#results > li")) >= 2
    stored = tab.page.evaluate("sessionStorage.getItem('knowledge-api-key')")
    assert stored == token
    tab.page.reload()  # the key stays for the tab's session
    assert tab.page.input_value("#api-key") == token


def test_results_show_their_source_and_similarity_and_the_answer_streams_in(
    tab: Playground, server: Any
) -> None:
    tab.enter_key(server[1])
    tab.watch_answer()
    tab.ask("How does the service answer a query, step by step?")
    tab.answered()

    assert tab.page.inner_text("#answer") == ANSWER
    lengths = [len(text) for text in tab.answer_seen() if text]
    assert len(set(lengths)) >= 3, f"the answer arrived at once: {lengths}"
    assert lengths == sorted(lengths) and lengths[-1] == len(ANSWER)

    results = tab.page.locator("#results > li")
    assert results.count() >= 2
    for source_type in tab.texts("#results .source-type"):
        assert source_type in SOURCE_TYPES
    assert all(title.strip() for title in tab.texts("#results .title"))
    for similarity in tab.texts("#results .similarity"):
        assert re.fullmatch(r"similarity [01]\.\d\d", similarity)
    assert any(tab.texts("#results .section")), "no result shows its section path"

    badges = tab.texts("#badges li")
    assert "computed" in badges and "by gemini" in badges
    assert any(re.fullmatch(r"total \d+\.\d ms", b) for b in badges)
    assert any(b.startswith("search ") for b in badges)
    assert tab.crashes == [] and tab.policy_violations() == []


def test_the_same_question_again_is_a_cache_hit(tab: Playground, server: Any) -> None:
    tab.enter_key(server[1])
    tab.ask("What does the response cache keep?")
    tab.answered()
    tab.ask("What does the response cache keep?")
    tab.answered()
    badges = tab.texts("#badges li")
    assert "cache hit" in badges and "computed" not in badges
    assert tab.page.inner_text("#answer") == ANSWER


def test_a_citation_scrolls_to_its_source_and_highlights_it(tab: Playground, server: Any) -> None:
    tab.enter_key(server[1])
    tab.ask("How are the keyword and vector rankings fused?")
    tab.answered()
    in_view = """n => {
      const box = document.getElementById('result-' + n).getBoundingClientRect();
      return box.top >= 0 && box.bottom <= window.innerHeight;
    }"""
    assert not tab.page.evaluate(in_view, 2), "the source is already on screen"

    tab.page.click("#answer a.cite[data-n='2']")
    tab.page.wait_for_function(in_view, arg=2)
    assert tab.page.get_attribute("#result-2", "class") == "highlighted"
    assert tab.page.evaluate("document.activeElement.id") == "result-2"

    tab.page.focus("#answer a.cite[data-n='1']")  # the keyboard follows a citation too
    tab.page.keyboard.press("Enter")
    tab.page.wait_for_function(in_view, arg=1)
    assert tab.texts("#results > li.highlighted .number") == ["[1]"]


def test_a_citation_marks_its_quote_and_the_document_marks_every_cited_span(
    tab: Playground, server: Any
) -> None:
    """A click on [n] marks the words of source n behind it; its link shows the whole
    document with every cited span of it marked, the chosen one scrolled into view. A
    citation no passage text supports says so."""
    tab.enter_key(server[1])
    with tab.page.expect_response(re.compile(r"/v1/knowledge/query$")) as sent:
        tab.ask(f"How is a query normalised, and what is the cache key? ({QUOTES})")
    tab.answered()
    assert json.loads(sent.value.request.post_data)["offsets"] == "utf16"
    links = tab.page.locator("#answer a.cite")
    assert links.count() == 2

    links.nth(0).click()
    quote = tab.page.locator("#result-1 .content mark")
    quote.wait_for()
    marked = quote.inner_text()
    assert marked.startswith("The normalised text, together with") and marked.endswith("cache key.")
    assert tab.page.get_attribute("#result-1", "class") == "highlighted"

    tab.page.click("#result-1 a.open-document")
    current = tab.page.locator("#document-text mark.current")
    current.wait_for()
    assert current.inner_text() == marked
    in_view = """() => {
      const box = document.querySelector('#document-text mark.current').getBoundingClientRect();
      const pane = document.querySelector('#document-text').getBoundingClientRect();
      return box.top >= Math.max(0, pane.top) && box.bottom <= Math.min(innerHeight, pane.bottom);
    }"""
    tab.page.wait_for_function(in_view)
    stored = tab.page.inner_text("#document-text")
    assert stored.startswith("# Knowledge API overview")  # the document's stored text
    assert tab.page.locator("#document-text mark").count() == 1  # the other is unsupported

    links.nth(1).click()
    note = tab.page.locator("#result-1 .quote-note")
    note.wait_for()
    assert "No sentence of this source" in note.inner_text()
    assert tab.page.locator("#result-1 .content mark").count() == 0
    assert tab.crashes == [] and tab.policy_violations() == []


def test_the_filters_change_the_request_and_the_results(tab: Playground, server: Any) -> None:
    tab.enter_key(server[1])
    tab.page.check("#sources input[value='wiki']")
    tab.page.fill("#limit", "3")
    with tab.page.expect_request(re.compile(r"/v1/knowledge/query$")) as sent:
        tab.ask("Which settings configure the cache?")
    body = sent.value.post_data_json
    assert body["sources"] == ["wiki"] and body["limit"] == 3
    assert body["collection"] == "default" and body["stream"] is True
    tab.answered()
    kinds = tab.texts("#results .source-type")
    assert kinds and len(kinds) <= 3 and set(kinds) == {"wiki"}

    tab.page.uncheck("#sources input[value='wiki']")
    tab.page.check("#sources input[value='jira']")  # the bundled docs hold no ticket
    tab.ask("Which settings configure the cache?")
    tab.answered()
    assert tab.texts("#results > li") == []
    assert tab.page.locator("#no-results").is_visible()

    tab.page.fill("#collection", "not a name!")
    tab.ask("Which settings configure the cache?")
    error = tab.page.locator("#error")
    error.wait_for(state="visible")
    assert re.match(r"400 invalid_request: collection: ", error.inner_text())


def test_the_filter_box_narrows_the_results_and_a_refused_filter_is_shown_beside_it(
    tab: Playground, server: Any
) -> None:
    tab.enter_key(server[1])
    where = {"path": "overview.md", "created_at": {"$gte": "2000-01-01"}}
    tab.page.fill("#filters", json.dumps(where))
    with tab.page.expect_request(re.compile(r"/v1/knowledge/query$")) as sent:
        tab.ask("How is a query answered?")
    assert sent.value.post_data_json["filters"] == where
    tab.answered()
    assert tab.texts("#results .source-id") and set(tab.texts("#results .source-id")) == {
        "overview.md"
    }
    assert tab.page.locator("#filters-error").is_hidden()

    asked: list[str] = []
    tab.page.on("request", lambda r: asked.append(r.url) if "/v1/" in r.url else None)
    tab.page.fill("#filters", '{"path": "overview.md"')
    tab.ask("How is a query answered?")
    beside = tab.page.locator("#filters-error")
    beside.wait_for(state="visible")
    assert re.fullmatch(r"filters: not JSON: .+", beside.inner_text())
    assert tab.page.get_attribute("#filters", "aria-invalid") == "true"
    tab.page.fill("#filters", "[]")
    tab.ask("How is a query answered?")
    assert beside.inner_text().startswith("filters: must be a JSON object")
    assert asked == [], "a filter that is not a JSON object was sent"

    tab.page.fill("#filters", "")
    assert beside.is_hidden() and tab.page.get_attribute("#filters", "aria-invalid") == "false"
    wrong = {"$or": [{"path": "api.md"}, {"created_at": {"$gte": "last week"}}]}
    tab.page.fill("#filters", json.dumps(wrong))
    tab.ask("How is a query answered?")
    beside.wait_for(state="visible")
    assert re.fullmatch(
        r"400 filters\.\$or\[1\]\.created_at\.\$gte: must be a number or an ISO 8601 date "
        r"\(request id [0-9a-f]+\)",
        beside.inner_text(),
    ), beside.inner_text()
    assert tab.page.inner_text("#filters-error .path") == "filters.$or[1].created_at.$gte"
    assert tab.page.locator("#error").is_hidden() and tab.texts("#results > li") == []
    tab.page.fill("#filters", json.dumps({"path": {"$bogus": 1}}))
    tab.ask("How is a query answered?")
    path = "() => document.querySelector('#filters-error .path')?.textContent"
    tab.page.wait_for_function(f"{path} === 'filters.path.$bogus'")
    assert "unknown operator '$bogus'" in beside.inner_text()
    assert not tab.crashes and not tab.policy_violations()


def test_pages_of_results_follow_the_offset_and_the_answer_keeps_citing_the_first(
    tab: Playground, server: Any
) -> None:
    url, token, _ = server
    tab.enter_key(token)
    tab.page.fill("#limit", "2")
    tab.ask("How is a query answered?")
    tab.answered()
    first = tab.page.locator("#results > li").evaluate_all("items => items.map(i => i.dataset.id)")
    assert tab.texts("#results .number") == ["[1]", "[2]"]
    assert tab.page.inner_text("#page-range") == "Results 1-2"
    assert tab.page.is_disabled("#previous") and tab.page.is_enabled("#next")

    with tab.page.expect_request(re.compile(r"/v1/knowledge/query$")) as sent:
        tab.page.click("#next")
    body = sent.value.post_data_json
    assert body["offset"] == 2 and body["synthesize"] is False and body["limit"] == 2
    tab.page.wait_for_function(
        "() => document.querySelector('#page-range').textContent === 'Results 3-4'"
    )
    second = tab.page.locator("#results > li").evaluate_all("items => items.map(i => i.dataset.id)")
    assert tab.texts("#results .number") == ["[3]", "[4]"]
    assert tab.page.inner_text("#answer") == ANSWER  # the first page's answer stays
    assert tab.page.is_enabled("#previous")

    whole = tab.page.request.post(  # the browser's own client: respx holds httpx here
        f"{url}/v1/knowledge/query",
        data={"query": "How is a query answered?", "limit": 4, "synthesize": False},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert [r["id"] for r in whole.json()["results"]] == first + second  # stable pages

    asked: list[str] = []
    tab.page.on("request", lambda r: asked.append(r.url) if "/v1/" in r.url else None)
    tab.page.click("#previous")  # the first page is the one the answer came with
    assert tab.texts("#results .number") == ["[1]", "[2]"] and asked == []
    tab.page.click("#next")
    tab.page.wait_for_function(
        "() => document.querySelector('#page-range').textContent === 'Results 3-4'"
    )
    tab.page.click("#answer a.cite[data-n='1']")  # a citation brings its page back
    assert tab.texts("#results > li.highlighted .number") == ["[1]"]
    assert not tab.crashes and not tab.policy_violations()


def test_counts_per_value_are_shown_and_a_value_narrows_the_filter(
    tab: Playground, server: Any
) -> None:
    tab.enter_key(server[1])
    tab.page.fill("#facets", "source_type, path")
    with tab.page.expect_request(re.compile(r"/v1/knowledge/query$")) as sent:
        tab.ask("How is a query answered?")
    assert sent.value.post_data_json["facets"] == ["source_type", "path"]
    tab.answered()
    assert tab.page.locator("#counts").is_visible()
    assert tab.texts("#facet-groups h3") == ["source_type", "path"]
    counts = {
        (field, value): int(count)
        for field, value, count in (
            (b.get_attribute("data-field"), b.get_attribute("data-value"), b.inner_text())
            for b in tab.page.locator("#facet-groups button").all()
        )
        for count in re.findall(r"\((\d+)\)$", count)
    }
    assert {v for f, v in counts if f == "path"} == set(SEED)
    assert {v for f, v in counts if f == "source_type"} == {"wiki"}
    per_path = sum(n for (f, _), n in counts.items() if f == "path")
    assert counts[("source_type", "wiki")] == per_path >= len(tab.texts("#results > li"))

    with tab.page.expect_request(re.compile(r"/v1/knowledge/query$")) as sent:
        tab.page.click("#facet-groups button[data-field='path'][data-value='overview.md']")
    assert sent.value.post_data_json["filters"] == {"path": "overview.md"}
    assert json.loads(tab.page.input_value("#filters")) == {"path": "overview.md"}
    tab.answered()
    assert set(tab.texts("#results .source-id")) == {"overview.md"}
    narrowed = tab.page.locator("#facet-groups button[data-field='path']").all_inner_texts()
    assert narrowed == [f"overview.md ({counts[('path', 'overview.md')]})"]
    assert not tab.crashes and not tab.policy_violations()


def test_a_counted_number_narrows_to_the_number_and_its_text(tab: Playground, server: Any) -> None:
    """Counts key a number by its JSON text: "3" is the number 3 and the string "3"."""
    url, token, writer = server
    tickets = [
        {
            "source_type": "jira",
            "source_id": key,
            "content": text,
            "metadata": {"severity": n},
            "collection": "counted",
        }
        for key, text, n in (
            ("SEV-1", "The upload queue stalls at night.", 3),
            ("SEV-2", "The upload queue drops retries.", "3"),
            ("SEV-3", "The upload queue is slow on Mondays.", 4),
        )
    ]
    stored = tab.page.request.post(
        f"{url}/v1/knowledge/documents",
        data={"documents": tickets},
        headers={"Authorization": f"Bearer {writer}"},
    )
    assert stored.status == 201, stored.text()
    tab.enter_key(token)
    tab.page.fill("#collection", "counted")
    tab.page.fill("#facets", "severity")
    tab.ask("Why is the upload queue slow?")
    tab.answered()
    three = "#facet-groups button[data-field='severity'][data-value='3']"
    assert tab.page.inner_text(three) == "3 (2)"
    with tab.page.expect_request(re.compile(r"/v1/knowledge/query$")) as sent:
        tab.page.click(three)
    assert sent.value.post_data_json["filters"] == {"severity": {"$in": ["3", 3]}}
    tab.answered()
    assert sorted(tab.texts("#results .source-id")) == ["SEV-1", "SEV-2"]


def test_a_provider_failing_midway_leaves_only_the_next_ones_answer_and_a_warning(
    tab: Playground, server: Any
) -> None:
    tab.enter_key(server[1])
    tab.watch_answer()
    tab.ask(f"What happens to a query during an {BREAKS} of the search?")
    tab.answered()
    seen = tab.answer_seen()
    gemini_said, groq_said = PIECES[0].strip(), GROQ_PIECES[0].strip()
    assert gemini_said in seen, "Gemini's text was never shown"
    assert not any(gemini_said in text and groq_said in text for text in seen), seen
    assert tab.page.inner_text("#answer") == "".join(GROQ_PIECES)
    assert "by groq" in tab.texts("#badges li")
    [warning] = tab.texts("#warnings li")
    assert "gemini" in warning


def test_thumbs_rate_the_answer_by_its_query_id(tab: Playground, server: Any) -> None:
    tab.enter_key(server[1])
    assert tab.page.locator("#rate").is_hidden()
    tab.ask("What does the response cache keep?")
    tab.answered()
    tab.page.click("#rate-down")
    tab.page.wait_for_function("() => document.querySelector('#rated').textContent !== ''")
    assert tab.page.inner_text("#rated") == "Thanks: rating sent."
    assert tab.page.get_attribute("#rate-down", "aria-pressed") == "true"
    assert tab.page.get_attribute("#rate-up", "aria-pressed") == "false"
    tab.ask("How is a query answered?")
    tab.answered()
    assert tab.page.inner_text("#rated") == ""  # a new answer, not rated yet
    assert not tab.crashes and not tab.policy_violations()
