"""`knowledge-api eval --answers`: answers to judged queries against their confidence."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from knowledge_api.cli import main
from tests.cli_env import cli_home

PASSAGES = {
    "p1": "Paris is the capital of France and its largest city.",
    "p2": "The Loire is the longest river in France, flowing to the Atlantic.",
    "p3": "Berlin is the capital of Germany and a city of museums.",
    "p4": "Bread in Germany comes in hundreds of kinds, rye above all.",
}
QUERIES = {
    "q1": "capital of France",
    "q2": "longest river in France",
    "q3": "capital of Germany",
    "q4": "kinds of bread in Germany",
}
QRELS = [("q1", "p1", 2), ("q2", "p2", 1), ("q3", "p4", 2), ("q4", "p4", 3)]
"""q2's passage is only related (grade 1) and q3's judged passage is not the one its answer
cites: both answers count as wrong."""


@pytest.fixture
def beir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cli_home(tmp_path, monkeypatch)
    monkeypatch.setenv("KNOWLEDGE_SEED_ON_EMPTY", "false")
    monkeypatch.setenv("KNOWLEDGE_SYNTHESIZER", "extractive")
    monkeypatch.setenv("KNOWLEDGE_ANSWER_THRESHOLD", "0.1")
    folder = tmp_path / "set"
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": k, "title": "", "text": v}) + "\n" for k, v in PASSAGES.items())
    )
    (folder / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": k, "text": v}) + "\n" for k, v in QUERIES.items())
    )
    (folder / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{g}\n" for q, d, g in QRELS)
    )
    return folder


def test_the_table_reports_calibration_and_levels(
    beir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["eval", "--answers", str(beir)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == (
        "4 judged queries over 4 documents: 4 answered (50.0% right: first cited passage "
        "answers it), 0 insufficient_context (0 of them had an answering best passage)"
    )
    assert lines[1].split() == ["confidence", "answers", "mean", "conf", "right", "gap"]
    assert any(line.startswith("ECE (10 bins, shipped mapping, in sample): ") for line in lines)
    levels = [line for line in lines if line.startswith("level ")]
    counts = [int(re.search(r"(\d+) answers", line)[1]) for line in levels]  # type: ignore[index]
    assert len(levels) == 3 and sum(counts) == 4


def test_json_report_agrees_with_itself(beir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "--answers", "--json", str(beir)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["queries"], report["answered"], report["accuracy"]) == (4, 4, 0.5)
    assert sum(b["count"] for b in report["bins"]) == 4
    weighted = sum(b["count"] / 4 * abs(b["accuracy"] - b["confidence"]) for b in report["bins"])
    assert report["ece"] == pytest.approx(weighted)


def test_plot_writes_a_reliability_diagram(beir: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    target = tmp_path / "reliability.png"
    assert main(["eval", "--answers", str(beir), "--plot", str(target)]) == 0
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_says_which_extra_to_install(
    beir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails as if absent
    assert main(["eval", "--answers", str(beir), "--plot", "x.png"]) == 2
    assert "pip install 'knowledge-api[plot]'" in capsys.readouterr().err


def test_plot_needs_answers(beir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", str(beir), "--plot", "x.png"]) == 2
    assert "--plot" in capsys.readouterr().err


def test_each_retrieved_passage_is_answered_alone_too(
    beir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Up to `limit` more samples per question, each right when its own passage answers:
    q1 from p1 and q4 from p4; q2's p2 is only related, and q3's Berlin passage is not
    the judged one. The other passages found are about another country than the one
    asked about, or say nothing of what is asked of it (p4 of a capital): answered
    alone, they are refused (insufficient_context), not counted as wrong answers."""
    assert main(["eval", "--answers", "--json", str(beir)]) == 0
    alone = json.loads(capsys.readouterr().out)["passages"]
    assert alone["answered"] == 4 and alone["insufficient_context"] > 0
    assert round(alone["accuracy"] * alone["answered"]) == 2
    assert sum(b["count"] for b in alone["bins"]) == alone["answered"]
    assert main(["eval", "--answers", str(beir)]) == 0
    table = capsys.readouterr().out
    total = alone["answered"] + alone["insufficient_context"]
    assert (
        f"every retrieved passage answered alone: {total} passages, {alone['answered']} " in table
    )
