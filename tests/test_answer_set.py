"""The answer question set (tests/answers.json) stays true to the documents it asks about.

Each answering sentence is scored by whether an answer quotes it, so a sentence the docs
have since reworded can never be matched and silently counts as a miss. This checks every
sentence against its document, and every `also` against the corpus, as
`scripts/answer_set.py` compares them.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("answer_set", ROOT / "scripts" / "answer_set.py")
assert _spec and _spec.loader
answer_set = sys.modules.setdefault("answer_set", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(answer_set)

QUESTIONS = answer_set.questions(ROOT / "tests" / "answers.json")


def _folder(question) -> Path:
    return ROOT / "knowledge_api" / "docs" if question.corpus == "docs" else answer_set.NOTES


def _said(sentence: str, text: str) -> bool:
    return answer_set.normalised(sentence)[: answer_set.PREFIX] in text


@pytest.mark.parametrize("question", [q for q in QUESTIONS if q.sentence], ids=lambda q: q.ask[:60])
def test_every_answering_sentence_stands_in_the_documents(question):
    """The sentence in its own document; each `also` in any document of the corpus."""
    folder = _folder(question)
    assert _said(question.sentence, answer_set.normalised((folder / question.doc).read_text()))
    corpus = " ".join(answer_set.normalised(p.read_text()) for p in sorted(folder.glob("*.md")))
    assert [s for s in question.also if not _said(s, corpus)] == []


def test_tuned_only_prints_nothing_of_the_held_out_questions(capsys):
    """A tuning run sees the tuned row and misses alone: no held-out row, count or miss."""

    def scored(ask: str, tuned: bool) -> object:
        question = answer_set.Question(ask, "docs", "api.md", "The answer.", tuned)
        return answer_set.Scored(question, "success", "Something else.", False)

    both = [scored("tuned question?", True), scored("kept out question?", False)]
    answer_set.report(both, misses=True, tuned_only=True)
    shown = capsys.readouterr().out
    assert "tuned question?" in shown
    assert "kept out" not in shown
    assert "held out" not in shown
    assert "\nall " not in shown
    answer_set.report(both, misses=True)
    assert "kept out question?" in capsys.readouterr().out
