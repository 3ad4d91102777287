"""The filter tree (knowledge_api.filters) as the JSON the Postgres search functions
take (`filter_where`, compiled in the database by knowledge_filter_sql, migration 008),
so Postgres and Supabase's PostgREST apply it in the query itself.

The form is normalised here, where it is cheap: `$ne`/`$nin` become `$not` of
`$eq`/`$in`, `$eq` is an `$in` of one value, dates travel as milliseconds since the
epoch, and a test no value can pass (a number against a text column) is a constant.
"""

from __future__ import annotations

from typing import Any

from knowledge_api.filters import DATE_FIELDS, RANGES, Combined, Condition, Instant, Negated, Node

Tree = dict[str, Any]


def filter_tree(node: Node) -> Tree:
    if isinstance(node, Combined):
        return {"op": node.op, "parts": [filter_tree(part) for part in node.parts]}
    if isinstance(node, Negated):
        return {"op": "$not", "part": filter_tree(node.part)}
    if node.acl:  # the passage's access list holds one of the principals
        return {"op": "$acl", "values": node.texts()}
    if (positive := node.positive()) is not None:
        return {"op": "$not", "part": filter_tree(positive)}
    return _own(node) if node.own else _metadata(node)


def constant(value: bool) -> Tree:
    return {"op": "$const", "value": value}


def _own(condition: Condition) -> Tree:
    op, value, field = condition.op, condition.value, condition.field
    leaf: Tree = {"op": op, "field": field, "own": True}
    dated = field in DATE_FIELDS
    if op == "$exists":
        return constant(bool(value))
    if op == "$contains":
        return {**leaf, "value": value}
    if op in RANGES:
        if not isinstance(value, Instant):
            return constant(False)  # a text or a timestamp is never a number
        return {**leaf, "kind": "date", "value": value.millis}
    kept: list[Any] = condition.millis() if dated else condition.texts()
    if not kept:
        return constant(False)
    return {**leaf, "op": "$in", "kind": "date" if dated else "text", "values": kept}


def _metadata(condition: Condition) -> Tree:
    op, value = condition.op, condition.value
    leaf: Tree = {"op": op, "field": condition.field}
    if op in RANGES:
        if isinstance(value, Instant):
            return {**leaf, "kind": "date", "value": value.millis}
        return {**leaf, "kind": "number", "value": value}
    if op in ("$exists", "$contains"):
        return {**leaf, "value": value}
    return {**leaf, "op": "$in", "values": list(condition.values)}
