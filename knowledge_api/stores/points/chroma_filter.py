"""The filter tree (knowledge_api.filters) as Chroma's `where`, over the fields a chunk
carries (`chunk_fields`).

Chroma's `where` knows values, ranges of numbers, `$in`/`$nin`, list membership and
`$and`/`$or`, but no `$not` and no test of a key's presence. So each chunk also keeps
the lists of its metadata keys, of those holding numbers and of those holding dates,
each date as epoch milliseconds, and the words of its texts; `$not` is pushed down to
the conditions (De Morgan) and each negated condition written as its complement, e.g.
not `n > 3` is `n` not a number, or `n <= 3`. Chroma's `$ne`, `$nin` and
`$not_contains` match a chunk without the field, as the language's complements do.
"""

from __future__ import annotations

import math
from typing import Any

from knowledge_api.filters import RANGES, Combined, Condition, Instant, Negated, Node, unsupported
from knowledge_api.models import Document
from knowledge_api.stores import records

META_PREFIX = "meta."
BACKEND = "chroma"
PUBLIC = "public"
Where = dict[str, Any]
NOTHING: Where = {"chunk_index": {"$lt": 0}}
"""A `where` no chunk passes."""
COMPLEMENT = {"$gt": "$lte", "$gte": "$lt", "$lt": "$gte", "$lte": "$gt"}
INT64 = 2**63


def chunk_fields(doc: Document) -> dict[str, Any]:
    """The metadata of a chunk beyond its record: metadata values flattened under
    `meta.`, and what `where` needs for the rest of the language (lists only when not
    empty: Chroma refuses empty lists)."""
    found = records.filter_record(doc)
    fields: dict[str, Any] = {
        f"{META_PREFIX}{key}": value
        for key, value in doc.metadata.items()
        if isinstance(value, str | int | float | bool)
    }
    for name in ("keys", "numbers", "dates", "source_words"):
        if found[name]:
            fields[f"filter.{name}"] = found[name]
    fields.update({f"ms.{key}": at for key, at in found["ms"].items()})
    fields.update({f"words.{key}": each for key, each in found["words"].items()})
    for name in ("created_at", "updated_at", "created_ms", "updated_ms"):
        if found[name] is not None:
            fields[name] = found[name]
    fields["acl"] = records.stored_acl(doc.acl)
    return fields


def chroma_where(source_types: tuple[str, ...] | None, where: Node | None) -> Where | None:
    clauses: list[Where | bool] = []
    if source_types is not None:
        clauses.append({"source_type": {"$in": list(source_types)}})
    if where is not None:
        clauses.append(_node(where, negated=False))
    found = _all(clauses)
    if found is True:
        return None
    return NOTHING if found is False else found


def _node(node: Node, negated: bool) -> Where | bool:
    if isinstance(node, Negated):
        return _node(node.part, not negated)
    if isinstance(node, Combined):
        parts = [_node(part, negated) for part in node.parts]
        return _all(parts) if (node.op == "$and") != negated else _any(parts)
    if node.acl:
        return _acl(node, negated)
    if (positive := node.positive()) is not None:
        return _node(positive, not negated)
    return _own(node, negated) if node.own else _metadata(node, negated)


def _acl(condition: Condition, negated: bool) -> Where | bool:
    """The chunks whose access list holds one of the principals (or, `negated`, none of
    them). A chunk written before access lists were kept has no list (every list
    written since starts with records.STORED_ACL) and is public."""
    principals = condition.texts()
    test = "$not_contains" if negated else "$contains"
    tests: list[Where | bool] = [{"acl": {test: p}} for p in principals]
    if PUBLIC not in principals:
        return _all(tests) if negated else _any(tests)
    if negated:  # a list, without any of them
        return _all([*tests, {"acl": {"$contains": records.STORED_ACL}}])
    return _any([*tests, {"acl": {"$not_contains": records.STORED_ACL}}])


def _all(parts: list[Where | bool]) -> Where | bool:
    return _joined(parts, "$and", decides=False)


def _any(parts: list[Where | bool]) -> Where | bool:
    return _joined(parts, "$or", decides=True)


def _joined(parts: list[Where | bool], op: str, decides: bool) -> Where | bool:
    """The parts joined by `op`: `decides` (False for $and, True for $or) when a part
    is it, the other constant when every part is that one, else the clauses left."""
    if any(part is decides for part in parts):
        return decides
    kept = [part for part in parts if part is not (not decides)]
    if not kept:
        return not decides
    return kept[0] if len(kept) == 1 else {op: kept}


def _own(condition: Condition, negated: bool) -> Where | bool:
    op, value, field = condition.op, condition.value, condition.field
    if op == "$exists":
        return bool(value) != negated
    if op == "$contains" and field == "source_id":
        return {"filter.source_words": {"$not_contains" if negated else "$contains": value}}
    if op == "$contains":  # a source type is one word (models.SOURCE_TYPES): the word it holds
        return {field: {"$ne" if negated else "$eq": value}}
    if field in ("created_at", "updated_at"):
        name = "created_ms" if field == "created_at" else "updated_ms"
        if op in RANGES:
            assert isinstance(value, Instant)
            return {name: {COMPLEMENT[op] if negated else op: value.millis}}
        return {name: {"$nin" if negated else "$in": condition.millis()}}
    if op in RANGES:
        if isinstance(value, Instant):
            raise unsupported(BACKEND, op, f"a date range on {field}")
        return negated  # a text is never a number
    texts = condition.texts()
    if not texts:
        return negated
    return {field: {"$nin" if negated else "$in": texts}}


def _metadata(condition: Condition, negated: bool) -> Where | bool:
    op, value, key = condition.op, condition.value, condition.field
    field = f"{META_PREFIX}{key}"
    if op == "$exists":
        present = bool(value) != negated
        return {"filter.keys": {"$contains" if present else "$not_contains": key}}
    if op == "$contains":
        return {f"words.{key}": {"$not_contains" if negated else "$contains": value}}
    if op in RANGES:
        dated = isinstance(value, Instant)
        name, operand = (
            (f"ms.{key}", value.millis) if isinstance(value, Instant) else (field, value)
        )
        assert isinstance(operand, int | float)  # a range's operand (filters.operand_of)
        if not negated:
            return _compared(name, op, operand)
        kind = "filter.dates" if dated else "filter.numbers"
        return _any([{kind: {"$not_contains": key}}, _compared(name, COMPLEMENT[op], operand)])
    values = condition.values
    numbers = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    groups = [
        condition.texts(),
        [whole for v in numbers if (whole := _whole(v)) is not None],  # 5 matches 5.0 too
        [v for v in values if isinstance(v, bool)],
    ]
    tests: list[Where | bool] = [
        {field: {"$nin" if negated else "$in": group}} for group in groups if group
    ]
    fractions = [v for v in numbers if _whole(v) is None]
    tests += [_compared(field, "$ne" if negated else "$eq", v) for v in fractions]
    return _all(tests) if negated else _any(tests)


def _whole(number: int | float) -> int | None:
    """The number as the integer Chroma compares exactly (with integers and floats
    alike); None for a fraction or a float beyond 64 bits."""
    if isinstance(number, int):
        return number
    return int(number) if number.is_integer() and -INT64 <= number < INT64 else None


def _compared(name: str, op: str, number: int | float) -> Where | bool:
    """`name op number` as Chroma must be asked it. Chroma compares an integer value
    with a float operand cut to an integer (toward zero, saturating at 64 bits), so
    `{"$gte": 0.5}` lets 0 through and `{"$lt": 0.5}` keeps it out; an integer operand
    it compares with a float value exactly. So a fraction's test is corrected by the
    integers either side of it: `n >= 0.5` is `n >= 0.5 and n != 0`."""
    whole = _whole(number)
    if whole is not None:
        return {name: {op: whole}}
    floor = math.floor(number)  # the 64-bit integers either side of it, if any:
    below = min(floor, INT64 - 1) if floor >= -INT64 else None
    above = max(floor + 1, -INT64) if floor + 1 < INT64 else None
    cut = min(max(math.trunc(number), -INT64), INT64 - 1)
    if op == "$eq":
        return _all([{name: {"$eq": number}}, {name: {"$ne": cut}}])
    if op == "$ne":
        return _any([{name: {"$ne": number}}, {name: {"$eq": cut}}])
    test: Where = {name: {op: number}}
    if op in ("$gt", "$lt"):  # add the integer next to it that the cut left out
        nearest = above if op == "$gt" else below
        return _any([test, {name: {"$eq": nearest}}]) if nearest is not None else test
    farthest = below if op == "$gte" else above  # take out the one the cut let in
    return _all([test, {name: {"$ne": farthest}}]) if farthest is not None else test
