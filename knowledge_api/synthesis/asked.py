"""What a question asks for beyond its words: the kind of thing that answers it (its
expected answer type) and the things it asks about the absence of.

"What status does ... get?" asks for an HTTP status, "How many ...?" or "What is the
longest ...?" for a number, "Which table ...?" for a name written as code, "What is the
default ...?" for a value (a number or code). A sentence that holds none repeats the
question's words without completing them: a line on a `status` field is no answer to
"what status", whatever words it shares with the question.

"A request without a key" asks about the absence of a key: a sentence that denies it too
("No key, or an unknown or revoked one: 401 ...") speaks of that case, one that names a
key without denying it ("A key limited to some collections ...") of another."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from enum import Enum

from knowledge_api import text


class Kind(Enum):
    STATUS = "status"
    """An HTTP status: three digits from 100 to 599."""
    NUMBER = "number"
    """A quantity: digits, or a number written as a word."""
    NAME = "name"
    """A name written as code: a table, a setting, a field, a command."""
    VALUE = "value"
    """A number or a name written as code: a default."""


ASKED = {
    "status": Kind.STATUS,
    **dict.fromkeys(
        (
            "code", "longest", "largest", "biggest", "shortest", "smallest", "maximum",
            "minimum", "max", "min", "limit", "size", "timeout", "port", "number", "count",
            "length", "many", "much", "long", "large", "big", "often", "old", "far",
        ),
        Kind.NUMBER,
    ),
    **dict.fromkeys(
        (
            "table", "tables", "setting", "settings", "variable", "variables", "header",
            "headers", "field", "fields", "column", "columns", "command", "commands",
            "endpoint", "endpoints", "route", "routes", "function", "functions", "flag",
            "flags", "option", "options", "parameter", "parameters", "file", "files",
        ),
        Kind.NAME,
    ),
    "default": Kind.VALUE,
}  # fmt: skip
"""The words of a question's wh-phrase that say what it asks for, and what they ask. A
code is a number (an exit code, an HTTP status); a status is an HTTP status when it is
what the wh-word asks for ("What status does ... get?"), not past a copula ("What is the
status of the job?" asks for a state)."""
WH = frozenset(("what", "which", "how"))
COPULAS = frozenset(("is", "are", "was", "were"))
SKIPPED = COPULAS | {"the", "a", "an"}
"""Read past between the wh-word and what it asks for ("What is the default ...")."""
ENDS = frozenset(
    (
        "does", "do", "did", "can", "could", "may", "might", "must", "shall", "should",
        "will", "would", "has", "have", "had", "happens", "happen", "of", "for", "in", "on",
        "per", "to", "from", "with", "by", "at", "that", "when", "if",
    )
)  # fmt: skip
"""Words that end a wh-phrase: past them the question says of what, not what kind."""
PHRASE_WORDS = 4
"""Most words of a wh-phrase read for what it asks for."""

_STATUS = re.compile(r"\b[1-5]\d\d\b")
_NUMBER = re.compile(r"(?<![\w.])\d[\d.,]*")
"""A number: digits that start a token ("5s", "127.0.0.1"; not "PM2" or "/v1")."""
_CODE = re.compile(r"`[^`\n]+`")
NUMBER_WORDS = frozenset(
    (
        "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
        "twelve", "twenty", "dozen", "hundred", "thousand", "million", "twice", "half",
    )
)  # fmt: skip
"""Numbers written as words ("one" is left out: it is as often a pronoun)."""


def asked_kind(question: str) -> Kind | None:
    """The kind of thing the question's wh-phrase asks for, or None: "how" followed by a
    quantity word ("how many", "how long"), or "what"/"which" followed by up to
    PHRASE_WORDS words that end at an auxiliary or a preposition ("What lock timeout
    does ...", "What is the default limit of ..."). Copulas and articles are read past,
    so a complement is read too ("Which embedder is the default?"). A question asking
    what happens, what something means or how to do something asks for no kind."""
    words = text.words(question)
    for start, word in enumerate(words):
        if word in WH:
            return _kind_after(words[start + 1 :], how=word == "how")
    return None


def _kind_after(words: list[str], how: bool) -> Kind | None:
    if how:
        return ASKED.get(words[0]) if words and ASKED.get(words[0]) is Kind.NUMBER else None
    read = 0
    copula = False
    for word in words:
        copula = copula or word in COPULAS
        if word in SKIPPED:
            continue
        if word in ENDS or read == PHRASE_WORDS:
            return None
        if word in ASKED:
            kind = ASKED[word]
            return None if kind is Kind.STATUS and copula else kind
        read += 1
    return None


NEGATED = re.compile(r"\b(?:without|no|not|never)\s+(?:(?:a|an|the|any)\s+)?[\w-]+", re.IGNORECASE)
"""A word denied: what a sentence says does not happen, or is not there."""
ABSENT = re.compile(r"\b(?:without|no)\s+(?:(?:a|an|the|any)\s+)?[\w-]+", re.IGNORECASE)
"""A thing a question asks about the absence of ("a request without a key", "with no
body"). Not a verb it denies: "Why is my file not indexed?" is answered as often by
the rule for what is indexed as by a sentence that denies it."""


def absent(question: str) -> set[str]:
    """The stems of the things a question asks about the absence of."""
    return _last_words(ABSENT, question)


def _last_words(pattern: re.Pattern[str], passage: str) -> set[str]:
    return {text.stem(match.split()[-1].casefold()) for match in pattern.findall(passage)}


def agreeing(sentence: str, words: set[str], absences: set[str]) -> set[str]:
    """The stemmed `words` of a sentence as they answer a question about the absence of
    `absences`: an absent thing counts only where the sentence denies it too, and then
    so does the question's "without". Asked what a request without a key gets,
    "Requests with a missing key count against ..." names a key, not its absence; "No
    key, or an unknown or revoked one: 401 ..." speaks of that case."""
    own = _last_words(NEGATED, sentence) & absences
    words = (words - absences) | own
    return words | {"without"} if own else words - {"without"}


def holders(question: str, sentences: Iterable[str]) -> set[str]:
    """The sentences holding a thing of the kind the question asks for, that the question
    does not give already ("What status follows a 503?" is not answered by a line that
    repeats 503); none when it asks for no kind."""
    kind = asked_kind(question)
    if kind is None:
        return set()
    given = set(_values(question, kind))
    return {s for s in sentences if any(v not in given for v in _values(s, kind))}


def _values(sentence: str, kind: Kind) -> Iterator[str]:
    """The things of `kind` a text holds, casefolded."""
    if kind is Kind.STATUS:
        for code in _CODE.findall(sentence):
            if _STATUS.fullmatch(code.strip("`")):
                yield code.strip("`")
        yield from _STATUS.findall(_CODE.sub(" ", sentence))
        return
    if kind is not Kind.NUMBER:
        yield from (code.strip("`").casefold() for code in _CODE.findall(sentence))
    if kind is not Kind.NAME:
        yield from _NUMBER.findall(sentence)
        yield from NUMBER_WORDS.intersection(text.words(sentence))
