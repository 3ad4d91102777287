"""The filter tree (knowledge_api.filters) as Qdrant's payload `Filter`.

`$and`, `$or` and `$not` are a filter's must, should and must_not (filters nest), and
must_not matches a point without the field, as the language's complements do. Values
match as values, numbers as ranges, presence as the field not being empty. Dates,
words and the document's timestamps are read from what each point carries for them
(`chunk_fields`: dates as epoch milliseconds, words of texts as lists).
"""

from __future__ import annotations

import re
from typing import Any

from knowledge_api.filters import RANGES, Combined, Condition, Instant, Negated, Node, unsupported
from knowledge_api.models import Document
from knowledge_api.stores import records

BACKEND = "qdrant"
PUBLIC = "public"
RANGE_NAMES = {"$gt": "gt", "$gte": "gte", "$lt": "lt", "$lte": "lte"}


def chunk_fields(doc: Document) -> dict[str, Any]:
    """The payload beyond a chunk's record that filters read."""
    found = records.filter_record(doc)
    return {
        "created_at": found["created_at"],
        "updated_at": found["updated_at"],
        "created_ms": found["created_ms"],
        "updated_ms": found["updated_ms"],
        "filter": {name: found[name] for name in ("ms", "words", "source_words")},
        "acl": records.stored_acl(doc.acl),
    }


def quoted(key: str) -> str:
    """A payload key as one path segment: quoted unless it is a plain name."""
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else f'"{key}"'


def payload_filter(m: Any, node: Node) -> Any:
    """The condition of `node`: a Filter, a field condition, or True/False when no
    point could fail or pass it."""
    if isinstance(node, Combined):
        parts = [payload_filter(m, part) for part in node.parts]
        return _all(m, parts) if node.op == "$and" else _any(m, parts)
    if isinstance(node, Negated):
        return _not(m, payload_filter(m, node.part))
    if node.acl:
        return _acl(m, node)
    if (positive := node.positive()) is not None:
        return _not(m, payload_filter(m, positive))
    return _own(m, node) if node.own else _metadata(m, node)


def _acl(m: Any, condition: Condition) -> Any:
    """The chunks whose access list holds one of the principals; a chunk written before
    access lists were kept (none on it: records.STORED_ACL) is public."""
    principals = condition.texts()
    listed = m.FieldCondition(key="acl", match=m.MatchAny(any=principals))
    if PUBLIC not in principals:
        return listed
    unlisted = m.IsEmptyCondition(is_empty=m.PayloadField(key="acl"))
    return _any(m, [listed, unlisted])


def _all(m: Any, parts: list[Any]) -> Any:
    if any(part is False for part in parts):
        return False
    kept = [part for part in parts if part is not True]
    return True if not kept else kept[0] if len(kept) == 1 else m.Filter(must=kept)


def _any(m: Any, parts: list[Any]) -> Any:
    if any(part is True for part in parts):
        return True
    kept = [part for part in parts if part is not False]
    return False if not kept else kept[0] if len(kept) == 1 else m.Filter(should=kept)


def _not(m: Any, part: Any) -> Any:
    return (not part) if isinstance(part, bool) else m.Filter(must_not=[part])


def _own(m: Any, condition: Condition) -> Any:
    op, value, field = condition.op, condition.value, condition.field
    if op == "$exists":
        return bool(value)
    if op == "$contains":  # a source type is one word (models.SOURCE_TYPES): the word it holds
        key = "filter.source_words" if field == "source_id" else field
        return m.FieldCondition(key=key, match=m.MatchValue(value=value))
    if field in ("created_at", "updated_at"):
        key = "created_ms" if field == "created_at" else "updated_ms"
        if op in RANGES:
            assert isinstance(value, Instant)
            return m.FieldCondition(key=key, range=m.Range(**{RANGE_NAMES[op]: value.millis}))
        return m.FieldCondition(key=key, match=m.MatchAny(any=condition.millis()))
    if op in RANGES:
        if isinstance(value, Instant):
            raise unsupported(BACKEND, op, f"a date range on {field}")
        return False  # a text is never a number
    texts = condition.texts()
    return m.FieldCondition(key=field, match=m.MatchAny(any=texts)) if texts else False


EXACT_DOUBLES = 2**53
"""Beyond, not every integer is a double, and a range compares as doubles: an integer
value that large (a snowflake id) is matched as an integer, exactly (a range would
miss it, or match its neighbours that round to the same double)."""


def _metadata(m: Any, condition: Condition) -> Any:
    op, value = condition.op, condition.value
    path = f"metadata.{quoted(condition.field)}"
    if op == "$exists":
        empty = m.IsEmptyCondition(is_empty=m.PayloadField(key=path))
        return m.Filter(must_not=[empty]) if value else empty
    if op == "$contains":
        words = f"filter.words.{quoted(condition.field)}"
        return m.FieldCondition(key=words, match=m.MatchValue(value=value))
    if op in RANGES:
        if isinstance(value, Instant):
            dated = f"filter.ms.{quoted(condition.field)}"
            return m.FieldCondition(key=dated, range=m.Range(**{RANGE_NAMES[op]: value.millis}))
        if isinstance(value, int) and abs(value) > EXACT_DOUBLES:
            raise unsupported(BACKEND, op, "a range bound beyond 2^53 (it compares doubles)")
        return m.FieldCondition(key=path, range=m.Range(**{RANGE_NAMES[op]: value}))
    texts = condition.texts()
    tests = [m.FieldCondition(key=path, match=m.MatchAny(any=texts))] if texts else []
    for each in condition.values:
        if isinstance(each, bool) or (isinstance(each, int) and abs(each) > EXACT_DOUBLES):
            tests.append(m.FieldCondition(key=path, match=m.MatchValue(value=each)))
        elif isinstance(each, int | float):  # a range: 3 matches 3.0 too
            tests.append(m.FieldCondition(key=path, range=m.Range(gte=each, lte=each)))
    return _any(m, tests)
