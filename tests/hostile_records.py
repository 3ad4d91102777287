"""Documents that break the rules of POST /v1/knowledge/documents, each as a JSON-lines
record (`_id`, `text`) and as the field its refusal names, for the tests of every door
that makes documents: the route, uploads and `knowledge-api ingest`."""

from __future__ import annotations

import json
from typing import Any

GOOD = {"_id": "good", "text": "Kestrel rotates the ingest keys weekly.", "metadata": {"n": 1}}

BAD: list[tuple[str, dict[str, Any], str, str]] = [
    # (case, record, the field named, a word of the rule)
    ("nested", {"metadata": {"team": {"a": 1}}}, "metadata.team", "string, number or boolean"),
    ("list", {"metadata": {"tags": ["a"]}}, "metadata.tags", "string, number or boolean"),
    ("empty-key", {"metadata": {"": 1}}, "metadata", "keys must be"),
    ("dollar-key", {"metadata": {"$where": 1}}, "metadata", "not starting with '$'"),
    ("control-key", {"metadata": {"a\u0001b": 1}}, "metadata", "without control characters"),
    ("nul-value", {"metadata": {"a": "x\u0000"}}, "metadata.a", "NUL"),
    ("long-int", {"metadata": {"a": 2**70}}, "metadata.a", "64-bit"),
    ("nul-text", {"text": "a\u0000b"}, "text", "NUL"),
    ("nul-id", {"_id": "a\u0000b"}, "_id", "NUL"),
    ("long-id", {"_id": "x" * 3000}, "_id", "at most 500 characters"),
    ("blank-id", {"_id": "  "}, "_id", "must not be empty"),
    ("text-not-string", {"text": {"a": 1}}, "text", "must be a string"),
    ("long-title", {"title": "t" * 501}, "title", "at most 500 characters"),
    ("not-a-date", {"created_at": "last tuesday"}, "created_at", "ISO 8601"),
    ("date-not-string", {"updated_at": 1767225600}, "updated_at", "ISO 8601"),
    ("no-such-day", {"created_at": "2026-02-30"}, "created_at", "ISO 8601"),
    (
        "updated-first",
        {"created_at": "2026-02-01", "updated_at": "2026-01-31T23:00:00Z"},
        "updated_at",
        "must not be before created_at",
    ),
]
NOT_JSON = [
    # (case, the line, the field named, a word of the rule): what JSON bodies cannot carry
    ("nan", '{"_id": "n", "text": "t", "metadata": {"score": NaN}}', "metadata.score", "finite"),
    (
        "inf",
        '{"_id": "i", "text": "t", "metadata": {"score": -Infinity}}',
        "metadata.score",
        "finite",
    ),
    ("array", "[1, 2]", "line", "must be a JSON object"),
    ("garbage", "{not json", "line", "must be a JSON object"),
]


def record(case: dict[str, Any], number: int) -> dict[str, Any]:
    """GOOD with `case`'s fields (its metadata in place of GOOD's)."""
    return {**GOOD, "_id": f"bad-{number}", **case}


def corpus_lines() -> list[str]:
    """GOOD first, then each bad record, then GOOD again under another id."""
    lines = [json.dumps(GOOD)]
    lines += [json.dumps(record(case, n)) for n, (_, case, _, _) in enumerate(BAD)]
    lines += [line for _, line, _, _ in NOT_JSON]
    lines.append(json.dumps({**GOOD, "_id": "good-too"}))
    return lines


def as_document(case: dict[str, Any], number: int) -> dict[str, Any]:
    """The record as POST /v1/knowledge/documents takes it."""
    given = record(case, number)
    return {
        "source_type": "knowledge",
        "source_id": given["_id"],
        "content": given["text"],
        "title": given.get("title", ""),
        "metadata": given["metadata"],
        **{name: given[name] for name in ("created_at", "updated_at") if name in given},
    }


POSTED_NAMES = {"_id": "source_id", "text": "content"}
"""The field a refusal of POST /v1/knowledge/documents names, by the record's."""
