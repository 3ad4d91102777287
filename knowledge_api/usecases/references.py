"""A conversation's references resolved without a model: the offline rewrite of its
latest question (`conversation.offline`).

A pronoun ("how is it configured?") goes to the latest subject, an ordinal ("the first
one", "the latter") to the subject of that earlier question, an ellipsis ("and
Qdrant?") to the previous question about the new subject (a name alone replaces the
subject, the entity asked about, even when the previous question kept it and moved its
focus: "and Kestrel?" after "How do I roll back an Osprey wave?" is "How do I roll back
a Kestrel wave?"); a question without a name of its own stays on the current subject.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

MAX_TURNS = 8
"""Earlier user turns read (the latest ones); older turns are not referred to."""
SUBJECT_WORDS = 3


def vocabulary(words: str) -> frozenset[str]:
    return frozenset(words.split())


WORD = re.compile(r"[A-Za-z0-9_$/.-]*[A-Za-z0-9_$]|[A-Za-z]")
AUXILIARIES = vocabulary(
    "is are was were do does did can could should would will shall may might must has have "
    "had am be been being isn't aren't doesn't don't can't won't"
)
QUESTION_WORDS = AUXILIARIES | vocabulary("what which who whom whose when where why how")
STOP = vocabulary(
    "a an the of to in on for at by with from as and or but not no so if then than into "
    "about over under after before between through i me my we our you your please tell "
    "explain show give describe also too just more much many any some each every all "
    "there here get got let lets let's such again ok okay"
)
PRONOUNS = vocabulary("it its it's itself they them their theirs")
DEMONSTRATIVES = vocabulary("this that these those")
"""Pronouns when nothing follows ("how is that set?"), determiners before a noun
("those extractors"), conjunctions elsewhere ("check that it runs")."""
GENERIC = vocabulary(
    "configure configured configuring configuration set setting use used using uses work "
    "works working mean means meaning need needs needed happen happens change changes "
    "enable enabled disable disabled start started starting run runs running return "
    "returns returned say says said default defaults way ways difference thing things "
    "one ones other same else kind type types fail fails failing failed handle handles "
    "handled make makes made control controls controlled differ differs show shows "
    "talk talks call calls called send sends sent check checks look looks go goes "
    "add adds added read reads write writes report reports share shares apply applies "
    "contain contains choose chosen expose exposes answered ingest service accept accepts "
    "create creates created "
    "ingested get gets know find found happen compute computed computes give gives "
    "mean lead leads want like able possible"
)
COMMON = QUESTION_WORDS | STOP | PRONOUNS | DEMONSTRATIVES
PRONOUN = re.compile(r"\b(?:" + "|".join(sorted(PRONOUNS, key=len, reverse=True)) + r")\b", re.I)
DEMONSTRATIVE = re.compile(r"\b(?:this|that|these|those)\b(?=\s*(?:[?!.,]|$))", re.I)
LEADING = re.compile(r"^(?:(?:for|with|in|on|to|of|the|a|an|what|which|who)\s+)+", re.I)
ORDINALS = {
    "first": 0,
    "former": 0,
    "original": 0,
    "second": 1,
    "third": 2,
    "latter": -1,
    "last": -1,
    "previous": -1,
}
ORDINAL = re.compile(
    r"\b(?:the\s+)?(first|second|third|former|latter|last|previous|original)"
    r"(?:\s+(one|question|topic|thing|subject|source|result|passage|link|citation))?\b",
    re.IGNORECASE,
)
SOURCE_NOUNS = frozenset({"source", "result", "passage", "link", "citation"})
ALONE = frozenset({"former", "latter"})
"""Ordinals that refer by themselves ("the first" needs a noun: "the first one")."""
BEFORE_NOUN = frozenset({"the", "a", "an", "its", "their", "of", "in", "on", "for", "to", "from"})
"""Words after which a question's word is a thing asked of, not what is done."""
ELLIPSIS = re.compile(
    r"^\s*(?:(?:and|or|but|also|what\s+about|how\s+about|same\s+(?:for|with)|now|then)"
    r"\b[\s,]*)+",
    re.IGNORECASE,
)
"""The opening of "and X?", "what about X?", "and what about X?"."""


@dataclass(frozen=True, slots=True)
class Turn:
    role: str
    """user or assistant (other roles are not read)."""
    text: str
    cited: tuple[str, ...] = ()
    """Titles of the sources an assistant turn listed, in their order."""


@dataclass(slots=True)
class Resolved:
    question: str
    subject: str
    """What the conversation is about at this turn (its own, or inherited)."""
    focus: str
    """What this question asks about within the subject, in its own words."""
    cited: tuple[str, ...] = ()
    """Titles of the sources that go with the subject it inherited."""
    inherited: bool = False
    """Whether the subject comes from an earlier turn."""


def resolve(turns: Sequence[Turn]) -> list[Resolved]:
    """Each user question resolved against the ones before it (already resolved)."""
    done: list[Resolved] = []
    answers: list[tuple[str, ...]] = []
    for turn in turns:
        if turn.role == "assistant" and done:
            answers[-1] = turn.cited or answers[-1]
        elif turn.role == "user" and turn.text.strip():
            done.append(resolve_one(turn.text.strip(), done[-MAX_TURNS:], answers[-MAX_TURNS:]))
            answers.append(())
    return done


def resolve_one(text: str, earlier: list[Resolved], answers: list[tuple[str, ...]]) -> Resolved:
    own = focus_of(text)
    if not earlier:
        return Resolved(text, subject_of(text), own)
    previous, cited = earlier[-1], documents(answers[-1] if answers else ())
    if match := ORDINAL.search(text):
        position, noun = ORDINALS[match.group(1).lower()], (match.group(2) or "").lower()
        if noun in SOURCE_NOUNS:
            titles = answers[-1] if answers else ()
            if titles and -len(titles) <= position < len(titles):
                title = titles[position]
                return Resolved(replaced(text, match, title), title, title, (title,))
        elif noun or not own or match.group(1).lower() in ALONE:
            target = by_ordinal(earlier, position)
            if target is not None:
                target_cited = documents(answers[earlier.index(target)])
                question = replaced(text, match, target.subject)
                return Resolved(question, target.subject, own, target_cited, True)
    if lead := ELLIPSIS.match(text):
        rest = LEADING.sub("", text[lead.end() :].strip(" ?!.,"))
        if rest and not asks(rest):
            names = [word for word in WORD.findall(rest) if is_name(word, first=False)]
            entity = len(names) == len(WORD.findall(rest))
            if previous.inherited and previous.focus and not entity:  # the focus moves
                question = swapped(previous.question, previous.focus, rest)
                return Resolved(question, previous.subject, rest, previous.cited or cited, True)
            entity_asked = any(
                is_name(word, first=False) for word in WORD.findall(previous.subject)
            )
            moved = refocused(previous, rest) if entity_asked and not names else None
            if moved:  # "and the errors?" after "What does useChat send in the request?"
                return Resolved(moved, previous.subject, rest, previous.cited or cited, True)
            new = " ".join(names) if names and entity_asked else rest  # "the Qdrant store"
            if not mentions(previous.question, previous.subject):  # "and Kestrel?"
                return Resolved(about(previous.question, new), new, new)
            return Resolved(swapped(previous.question, previous.subject, new), new, new)
        text = text[lead.end() :].strip() or text
    words = [w.lower() for w in WORD.findall(text)]
    if PRONOUN.search(text) or any(
        word in DEMONSTRATIVES and (i + 1 == len(words) or words[i + 1] in COMMON)
        for i, word in enumerate(words)
    ):
        question = PRONOUN.sub(previous.subject, DEMONSTRATIVE.sub(previous.subject, text))
        return Resolved(question, previous.subject, own, cited, True)
    if not has_name(text):  # "how are the articles scored?": about the same subject
        question = text if own else about(text, previous.subject)  # "what are the defaults?"
        return Resolved(question, previous.subject, own, cited, True)
    return Resolved(text, subject_of(text), own)


def mentions(question: str, subject: str) -> bool:
    """Whether a question says its subject (one of the subject's words) in so many words."""
    said = {word.lower() for word in WORD.findall(question)}
    return any(word.lower() in said for word in WORD.findall(subject))


def refocused(previous: Resolved, focus: str) -> str | None:
    """The previous question asking `focus` of its entity, when it asked one thing of it,
    a noun alone after an article or a preposition: that thing gives way ("Where does
    PM2 write the warnings?", "and the errors?": "Where does PM2 write the errors?").
    None otherwise: "and the answer route?" after "How does the Python client stream?"
    puts another entity in the entity's place."""
    said = {word.lower() for word in WORD.findall(previous.subject)}
    asked = [word for word in WORD.findall(previous.focus) if word.lower() not in said]
    words = [word.lower() for word in WORD.findall(previous.question)]
    if len(asked) != 1 or asked[0].lower() not in words:
        return None
    place = words.index(asked[0].lower())
    alone = place + 1 == len(words) or words[place + 1] in COMMON  # not "health check"
    if place and words[place - 1] in BEFORE_NOUN and alone:
        return swapped(previous.question, asked[0], focus)
    return None


def about(text: str, subject: str) -> str:
    body = text.rstrip(" ?!.")
    return f"{body} ({subject}){text[len(body) :].strip()}"


def documents(titles: Sequence[str]) -> tuple[str, ...]:
    """The documents of cited sources ("Title > Section" gives Title): what the subject
    was found in, rather than the section that answered the question before."""
    return tuple(dict.fromkeys(title.split(" > ")[0] for title in titles))


def by_ordinal(earlier: list[Resolved], position: int) -> Resolved | None:
    """The earlier question whose subject comes at `position` among the distinct subjects."""
    distinct: list[Resolved] = []
    for each in earlier:
        if each.subject and all(each.subject.lower() != d.subject.lower() for d in distinct):
            distinct.append(each)
    if not distinct or not -len(distinct) <= position < len(distinct):
        return None
    return distinct[position]


def replaced(text: str, match: re.Match[str], subject: str) -> str:
    return f"{text[: match.start()]}{subject}{text[match.end() :]}"


def swapped(question: str, old: str, new: str) -> str:
    """The question about `new` in place of `old`: the first of old's names (or of its
    words, without names) gives way to new, its other names are dropped."""
    words = WORD.findall(old)
    names = [word for word in words if is_name(word, first=False)]
    gone = {word.lower() for word in names or words}
    kept: list[str] = []
    placed = False
    for word in WORD.findall(question):
        if word.lower() in gone:
            if not placed:
                if kept and kept[-1].lower() in ("a", "an"):  # "an Osprey wave", "a Kestrel wave"
                    kept[-1] = article(new, kept[-1])
                kept.append(new)
                placed = True
            continue
        kept.append(word)
    if not placed:
        kept.append(new)
    return " ".join(kept) + "?"


def article(word: str, written: str) -> str:
    """The indefinite article before `word`, capitalised as `written` was."""
    chosen = "an" if word[:1].lower() in "aeiou" else "a"
    return chosen.capitalize() if written[:1].isupper() else chosen


def asks(text: str) -> bool:
    """Whether a text is a question of its own ("how is it configured?" is; "which SQL
    functions?" and "Qdrant?" are not): a question word and a verb after it."""
    words = WORD.findall(text.lower())
    return bool(words) and words[0] in QUESTION_WORDS and any(w in AUXILIARIES for w in words)


def is_name(word: str, first: bool) -> bool:
    """Capitalised past the first word, or shaped like code (KNOWLEDGE_STORE, /v1/chat,
    match_siam_vectors), or an acronym (MCP, PM2)."""
    if word.lower() in COMMON:
        return False
    capitalised = not first and word[:1].isupper()
    camel = word[:1].islower() and any(c.isupper() for c in word[1:])  # useChat
    return (
        capitalised or camel or any(c in word for c in "_/.$") or (len(word) > 1 and word.isupper())
    )


def has_name(text: str) -> bool:
    return any(is_name(word, i == 0) for i, word in enumerate(WORD.findall(text)))


def subject_of(text: str) -> str:
    """What a question is about, in a few words: its names (PM2, Qdrant, /v1/chat);
    without names, in "which formats does asset ingestion accept?" the words after the
    verb that opens it, the last few that are not stop words, pronouns or common verbs
    ("asset ingestion"); else those of the whole text."""
    words = WORD.findall(text)
    names = [word for i, word in enumerate(words) if is_name(word, i == 0)]
    if names:
        return " ".join(list(dict.fromkeys(names))[:SUBJECT_WORDS])
    lowered = [word.lower() for word in words]
    opens = next((i for i, word in enumerate(lowered) if word in AUXILIARIES), None)
    after = focus_of(" ".join(words[opens + 1 :])) if opens is not None else ""
    chosen = (after or focus_of(text)).split()
    return " ".join(chosen[-SUBJECT_WORDS:])


def focus_of(text: str) -> str:
    """What a question asks about: its words that are not question words, stop words,
    pronouns or common verbs, as written."""
    words = [
        word
        for word in WORD.findall(text)
        if len(word) > 1 and word.lower() not in COMMON and word.lower() not in GENERIC
    ]
    return " ".join(dict.fromkeys(words))
