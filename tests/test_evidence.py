"""The words behind every citation: each marker's sentence in the answer, the quote in
its passage and in the stored document, in code points and in UTF-16 code units."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

from rapidfuzz import fuzz
from rapidfuzz.utils import default_process

from knowledge_api import evidence, spans, text
from knowledge_api.evidence import cite, marked
from knowledge_api.ingest.chunker import chunk_document
from knowledge_api.ingest.extract import html_to_markdown, pdf_file
from knowledge_api.models import Chunk, Document, Evidence, SearchHit
from knowledge_api.synthesis.extractive import shorten
from knowledge_api.synthesis.sentences import candidate_sentences
from tests.documents import pdf_bytes

HERE = Path(__file__).parent
NOTES = {path.stem: path.read_text() for path in (HERE / "product_notes").glob("*.md")}
HARD = (
    "# Cache\r\n\r\nThe café 🎉 keeps Tier-2 entries for 24\thours.\r\n"
    "Deploys run at 09:00 UTC,\tevery   day. Crème brûle\u0301e is e\u0301clair 🍮 too.\r\n\r\n"
    "日本語のテキストです。キャッシュは二十四時間保持します。\r\n"
)


def hits_of(*docs: Document) -> tuple[list[SearchHit], dict[str, str]]:
    hits = [
        SearchHit(chunk, doc.id, doc.source_type, doc.source_id, {}, 1.0, 1.0)
        for doc in docs
        for chunk in chunk_document(doc)
    ]
    return hits, {doc.id: doc.content for doc in docs}


def assert_exact(
    found: Evidence, answer: str, hits: list[SearchHit], texts: dict[str, str]
) -> None:
    """The quote is the document's stored text at its span, and reads at its passage
    span; every span slices the same text in both units."""
    assert found.quote is not None and found.document is not None and found.passage
    stored = texts[found.document_id]
    content = hits[found.n - 1].chunk.content
    assert stored[found.document[0] : found.document[1]] == found.quote
    passage = content[found.passage[0] : found.passage[1]]
    assert passage.split() == found.quote.split()
    for whole, points, units in (
        (stored, found.document, found.document_utf16),
        (content, found.passage, found.passage_utf16),
        (answer, found.answer, found.answer_utf16),
    ):
        assert units is not None and points is not None
        as_utf16 = whole.encode("utf-16-le")[2 * units[0] : 2 * units[1]].decode("utf-16-le")
        assert as_utf16 == whole[points[0] : points[1]]
    view = found.view("utf16")
    assert view["document"] == {"start": found.document_utf16[0], "end": found.document_utf16[1]}  # type: ignore[index]


def test_a_marker_cites_its_sentence_through_its_last_marker() -> None:
    answer = "Deploys run at 09:00 [1][2]. The cache keeps entries a day. [2] Done [3]. [1]"
    groups = marked(answer)
    assert [(g.numbers, g.claim) for g in groups] == [
        ((1, 2), "Deploys run at 09:00"),
        ((2,), "The cache keeps entries a day."),
        ((3,), "Done"),
        ((1,), "Done"),  # no words of its own: the sentence before
    ]
    assert answer[slice(*groups[0].span)] == "Deploys run at 09:00 [1][2]"
    assert answer[slice(*groups[1].span)] == "The cache keeps entries a day. [2]"
    assert answer[slice(*groups[3].span)].startswith("Done [3]")


def test_extractive_quotes_slice_exactly_in_both_units() -> None:
    """Emoji, combining accents, CJK, CRLF and tabs: the quote is the stored text, and
    every offset slices it in code points and in UTF-16."""
    doc = Document("wiki", "cache.md", HARD, "Cache")
    hits, texts = hits_of(doc)
    answer = (
        "The café 🎉 keeps Tier-2 entries for 24 hours. [1] "
        "Deploys run at 09:00 UTC, every day. [1] 日本語のテキストです。 [1]"
    )
    found = cite(answer, hits, texts)
    assert [e.quote for e in found] == [
        "The café 🎉 keeps Tier-2 entries for 24\thours.",
        "Deploys run at 09:00 UTC,\tevery   day.",
        "日本語のテキストです。",
    ]
    for each in found:
        assert_exact(each, answer, hits, texts)
        assert each.support == 1.0
    assert found[0].answer_utf16 == (0, found[0].answer[1] + 1)  # 🎉 counts two units


def test_a_written_sentence_quotes_the_passage_sentence_it_restates() -> None:
    doc = Document("knowledge", "falcon.md", NOTES["falcon"], "Falcon")
    hits, texts = hits_of(doc)
    hits = [hit for hit in hits if hit.chunk.section in ("Running Falcon", "Logs")]
    answer = (
        "By default Falcon listens on port 7400 [1], and its logs are written to "
        "/var/log/falcon/gateway.log, rotated every night at 02:00 [2]."
    )
    first, second = cite(answer, hits, texts)
    assert first.quote == "Falcon listens on port 7400 by default."
    logs = "Falcon writes its logs to `/var/log/falcon/gateway.log`, rotated every night at 02:00."
    assert second.quote == logs
    for each in (first, second):
        assert_exact(each, answer, hits, texts)
        assert each.support >= evidence.SUPPORT_FLOOR / 100


def test_a_sentence_no_passage_text_supports_is_unsupported() -> None:
    doc = Document("knowledge", "falcon.md", NOTES["falcon"], "Falcon")
    hits, texts = hits_of(doc)
    (found,) = cite("Osprey waits 10 minutes between two waves [1].", hits, texts)
    assert (found.quote, found.passage, found.document) == (None, None, None)
    assert found.view() == {
        "n": 1,
        "chunk_id": hits[0].chunk.id,
        "document_id": doc.id,
        "quote": None,
        "passage": None,
        "document": None,
        "answer": {"start": 0, "end": 45},
        "unsupported": True,
    }


def test_html_and_pdf_text_quotes_slice_the_stored_text(tmp_path: Path) -> None:
    """HTML extracted (entities decoded, <br> as a line break) and a PDF's pages: the
    quote and its spans are those of the text stored, not of the markup."""
    html = (
        "<html><body><article><h1>Ports</h1><p>Caf&eacute; &amp; bar servers listen on "
        "port 8080.<br>Restart them with <code>systemctl restart bar</code> &mdash; "
        "never by hand.</p></article></body></html>"
    )
    extracted = html_to_markdown(html)
    page = Document("wiki", "ports.html", extracted.content, "Ports")
    path = tmp_path / "manual.pdf"
    path.write_bytes(pdf_bytes([["The turbine manual covers blade pitch."], ["Torque is 40 Nm."]]))
    read = pdf_file(path)
    manual = Document("knowledge", "manual.pdf", read.content, "Manual", read.metadata)
    hits, texts = hits_of(page, manual)
    answer = "Café & bar servers listen on port 8080. [1] Torque is 40 Nm. [3]"
    assert len(hits) == 3 and hits[2].chunk.page == 2
    first, second = cite(answer, hits, texts)
    assert first.quote == "Café & bar servers listen on port 8080."
    assert second.quote == "Torque is 40 Nm."
    for each in (first, second):
        assert_exact(each, answer, hits, texts)


def test_a_chunk_stored_without_offsets_is_found_in_its_document() -> None:
    doc = Document("wiki", "cache.md", HARD, "Cache")
    hits, texts = hits_of(doc)
    for hit in hits:
        hit.chunk.start = hit.chunk.end = None
    answer = "Crème brûle\u0301e is e\u0301clair 🍮 too. [1]"
    (found,) = cite(answer, hits, texts)
    assert found.quote == "Crème brûle\u0301e is e\u0301clair 🍮 too."
    assert_exact(found, answer, hits, texts)


def test_every_sentence_the_extractive_synthesizer_quotes_is_found_exactly() -> None:
    """Each sentence the offline synthesizer may quote from the bundled docs finds its
    place: as it reads, by its words in order (links, bold left out), or as the best
    sentence (a sentence quoted with the first line of the code it introduces)."""
    docs = [
        Document("knowledge", path.name, path.read_text(), path.stem)
        for path in sorted((HERE.parent / "knowledge_api" / "docs").glob("*.md"))
    ]
    ways = {"read as it is": 0, "aligned": 0, "best sentence": 0}
    for doc in docs:
        hits, texts = hits_of(doc)
        for n, hit in enumerate(hits, 1):
            for sentence in candidate_sentences(hit.chunk.content):
                if evidence._MARKER.search(sentence):
                    continue  # a sentence holding "[2]" of its own: not a quote to test
                answer = f"{shorten(sentence)} [{n}]"
                (found,) = cite(answer, hits, texts)
                assert found.quote is not None, sentence
                assert_exact(found, answer, hits, texts)
                claim = shorten(sentence).removesuffix(" …")
                if spans.Squeezed(hit.chunk.content).find(claim):
                    ways["read as it is"] += 1
                elif found.support >= evidence.ALIGNED:
                    ways["aligned"] += 1
                else:
                    ways["best sentence"] += 1
    assert ways["read as it is"] > 1500
    assert ways["aligned"] >= 7 * ways["best sentence"]


WRITTEN = [
    ("falcon", "To restart Falcon, run systemctl restart falcon"),
    ("falcon", "Falcon's health check is GET /falcon/ping and returns 200 when the queue is up"),
    ("falcon", "By default Falcon listens on port 7400"),
    ("falcon", "Falcon is configured through /etc/falcon/falcon.toml"),
    ("falcon", "The batch_size setting defaults to 500 events sent to the queue at once"),
    ("falcon", "A failed batch is retried up to 3 times by default, set by retry_limit"),
    ("falcon", "Logs go to /var/log/falcon/gateway.log and are rotated nightly at 02:00"),
    ("kestrel", "Kestrel runs the nightly reports and data exports"),
    ("kestrel", "Jobs are defined in kestrel.yaml with one cron expression per job"),
    ("kestrel", "Running kestrel apply loads a changed file without restarting"),
    ("kestrel", "At most 8 jobs run at once; the rest wait in the queue"),
    ("kestrel", "Jobs running over 2 hours are stopped and reported as timed_out"),
    ("osprey", "Osprey ships releases to the fleet in waves of servers"),
    ("osprey", "A wave updates at most 20 servers together"),
    ("osprey", "Deployments start with osprey deploy --release R, 10 minutes between waves"),
    ("osprey", "osprey rollback --wave N reinstalls the previous release on that wave"),
    ("osprey", "Release bundles are cached in /var/cache/osprey for 7 days"),
]
ELSEWHERE = [
    ("falcon", "Kestrel runs at most 8 jobs at the same time"),
    ("falcon", "Bananas grow best in warm and humid climates"),
    ("falcon", "The rollback reinstalls the previous release on every server"),
    ("kestrel", "Restart Falcon with systemctl to clear the queue"),
    ("kestrel", "The quarterly budget is reviewed by the finance team in March"),
    ("kestrel", "Osprey waits 10 minutes between two waves"),
    ("osprey", "Falcon writes its logs to a file rotated every night"),
    ("osprey", "Passwords must be at least 12 characters long"),
    ("osprey", "Jobs are declared in a YAML file with cron expressions"),
    ("falcon", "The API answers in JSON and supports pagination with cursors"),
    ("kestrel", "Users can export their profile data as CSV from the settings page"),
    ("osprey", "The mobile app supports dark mode since version 3"),
]


def best_score(claim: str, note: str) -> float:
    """The token set ratio of the note's sentence (or two in a row) closest to `claim`."""
    doc = Document("knowledge", note, NOTES[note], note.title())
    scores = []
    for chunk in chunk_document(doc):
        sentences = text.sentence_spans(chunk.content)
        windows = sentences + [(a[0], b[1]) for a, b in pairwise(sentences)]
        scores += [
            fuzz.token_set_ratio(default_process(claim), default_process(chunk.content[a:b]))
            for a, b in windows
        ]
    return max(scores)


def test_the_support_floor_parts_restated_sentences_from_other_notes() -> None:
    """SUPPORT_FLOOR: sentences written about a note reach it against the note, and
    sentences about something else (another note's facts, other topics) stay below."""
    restated = [best_score(claim, note) for note, claim in WRITTEN]
    elsewhere = [best_score(claim, note) for note, claim in ELSEWHERE]
    assert min(restated) >= evidence.SUPPORT_FLOOR + 10  # 81 measured
    assert max(elsewhere) <= evidence.SUPPORT_FLOOR - 10  # 58 measured
    for note, claim in WRITTEN:
        doc = Document("knowledge", note, NOTES[note], note.title())
        hits, texts = hits_of(doc)
        supported = [cite(f"{claim} [{n}]", hits, texts)[0] for n in range(1, len(hits) + 1)]
        assert any(found.quote for found in supported), claim


def test_an_answer_marker_beyond_the_passages_gives_no_entry() -> None:
    chunk = Chunk("c", "d", 0, "Falcon listens on port 7400.", start=0, end=28)
    hit = SearchHit(chunk, "d", "knowledge", "f", {}, 1.0, 1.0)
    found = cite("Falcon listens on port 7400. [1][2]", [hit], {"d": chunk.content})
    assert [e.n for e in found] == [1]
    assert found[0].document == (0, 28)


def test_without_the_document_text_the_quote_is_the_passages() -> None:
    """A store that keeps no document text by id (tables other pipelines fill): the
    words are still found in the passage, and no document span is claimed."""
    doc = Document("knowledge", "falcon.md", NOTES["falcon"], "Falcon")
    hits, _ = hits_of(doc)
    hits = [hit for hit in hits if hit.chunk.section == "Running Falcon"]
    (found,) = cite("Falcon listens on port 7400 by default. [1]", hits, {})
    assert found.quote == "Falcon listens on port 7400 by default."
    assert found.passage is not None and found.document is None
    assert hits[0].chunk.content[found.passage[0] : found.passage[1]] == found.quote
    assert "unsupported" not in found.view()


def test_the_whitespace_compared_is_what_str_split_splits_at() -> None:
    """Squeezed's table of whitespace and str.split agree on every character, so the
    compact text and its map back to the stored offsets line up."""
    every = {chr(c) for c in range(0x110000) if chr(c).isspace()}
    assert set(spans.WHITESPACE) == every
    stored = "\u3000Caf\u00e9\u2028\u2028 e\u0301 \U0001f389\t\x1cend\u00a0"
    found = spans.Squeezed(stored)
    assert found.compact == " ".join(stored.split())
    for at, char in enumerate(found.compact):
        assert stored[found.original(at)] == char or (
            char == " " and stored[found.original(at)].isspace()
        )


def test_a_sentence_begins_at_its_first_word_or_emoji() -> None:
    answer = "Caches keep entries [1], and 🎉 deploys run daily [2]. 日本語です [1]"
    spans_of = [answer[slice(*group.span)] for group in marked(answer)]
    assert spans_of == ["Caches keep entries [1]", "and 🎉 deploys run daily [2]", "日本語です [1]"]
