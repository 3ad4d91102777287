"""The filter language of every search: parsed once into a tree that each store
translates into its own query, and evaluated here as the reference the stores agree with.

A filter is an object. Each key is a field: `source_type`, `source_id`, `created_at`
and `updated_at` are the stored passage's own; any other key names a metadata value.
A field maps to a value (equality) or to an object of operators: `$eq $ne $gt $gte $lt
$lte $in $nin $exists $contains`. `$and` and `$or` take a list of filters, `$not` one
filter. The keys of one object all hold (an implicit `$and`).

Values compare by kind: numbers as numbers, booleans as booleans, strings as strings;
the range operators take a number or an ISO 8601 date, and a date compares as an
instant with dates stored in metadata and with the passage's `created_at`/`updated_at`
(a bare date is midnight UTC, a time without an offset is UTC). A value of another kind
never matches a range. `$ne`, `$nin` and `$not` are complements: a passage without the
field matches them. `$contains` takes a word (no spaces) and matches string values
that hold it among their space-separated words. `acl` is the document's access list:
a principal (or `$contains` one) matches the documents whose ACL lists it, `$in` any of
several; a caller's search is always narrowed to its own principals as well.

Limits, checked before any store is reached: at most 64 conditions in all, nesting at
most 8 levels deep, at most 100 values in `$in`/`$nin`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from knowledge_api.errors import InvalidRequest
from knowledge_api.validation import (
    DATE_FORM,
    KEY_MAX_LENGTH,
    plain_key,
    principal,
    within_int64,
    without_nul,
)

MAX_CONDITIONS = 64
MAX_DEPTH = 8
MAX_VALUES = 100
VALUE_MAX_LENGTH = 1000

OWN_FIELDS = ("source_type", "source_id", "created_at", "updated_at")
"""Fields of the stored passage; any other field name is a metadata key."""
DATE_FIELDS = ("created_at", "updated_at")
ACL_FIELD = "acl"
"""The document's access list (knowledge_api.principals): `"group:hr"` or `$contains`
matches the documents whose ACL lists that principal, `$in` any of several; every
store reads it as one `$in` of principals."""
ACL_OPERATORS = ("$eq", "$contains", "$in")
EQUALITY = ("$eq", "$ne")
RANGES = ("$gt", "$gte", "$lt", "$lte")
MEMBERSHIP = ("$in", "$nin")
OPERATORS = (*EQUALITY, *RANGES, *MEMBERSHIP, "$exists", "$contains")
COMBINATORS = ("$and", "$or", "$not")

Scalar = str | int | float | bool

_DATE = DATE_FORM
"""The ISO 8601 forms compared as instants, in stored values and in filters alike."""
DATE_PATTERN = (
    r"^(?:000[1-9]|00[1-9]\d|0[1-9]\d\d|[1-9]\d{3})-"
    r"(?:(?:0[1-9]|1[0-2])-(?:0[1-9]|1\d|2\d)|(?:0[13-9]|1[0-2])-30|(?:0[13578]|1[02])-31)"
    r"(?:[T ](?:[01]\d|2[0-3]):[0-5]\d(?::[0-5]\d(?:\.\d{1,6})?)?"
    r"(?:Z|[+-](?:[01]\d|2[0-3]):[0-5]\d)?)?$"
)
"""The dates a filter takes, as a JSON Schema pattern: _DATE's forms with their fields in
range, from year 1 (a 29th of February is left to the parser, which knows leap years)."""


@dataclass(frozen=True, slots=True)
class Instant:
    """An ISO 8601 date of a filter, as milliseconds since the epoch (UTC: instants
    compare to the millisecond everywhere) and as the text the request gave."""

    millis: int
    text: str

    def iso(self) -> str:
        """The instant in UTC, as `YYYY-MM-DDTHH:MM:SS.fff+00:00`."""
        moment = datetime.fromtimestamp(self.millis / 1000, UTC)
        return moment.isoformat(timespec="milliseconds")


Value = Scalar | Instant | tuple[Scalar | Instant, ...]


@dataclass(frozen=True, slots=True)
class Condition:
    """One field tested by one operator; `value` is a scalar, an Instant (ranges on
    dates, any comparison on a date field), a tuple ($in/$nin) or a bool ($exists)."""

    field: str
    op: str
    value: Value

    @property
    def own(self) -> bool:
        return self.field in OWN_FIELDS

    @property
    def acl(self) -> bool:
        """A test of the document's access list: always `$in` of principals."""
        return self.field == ACL_FIELD

    @property
    def values(self) -> tuple[Scalar | Instant, ...]:
        """The values tested: those of `$in`/`$nin`, or the one value."""
        return self.value if isinstance(self.value, tuple) else (self.value,)

    def texts(self) -> list[str]:
        """The texts among the values."""
        return [v for v in self.values if isinstance(v, str)]

    def millis(self) -> list[int]:
        """The dates among the values, as milliseconds since the epoch."""
        return [v.millis for v in self.values if isinstance(v, Instant)]

    def positive(self) -> Condition | None:
        """The `$eq`/`$in` this `$ne`/`$nin` is the negation of; None for another op."""
        if self.op not in ("$ne", "$nin"):
            return None
        return Condition(self.field, "$eq" if self.op == "$ne" else "$in", self.value)


@dataclass(frozen=True, slots=True)
class Combined:
    """`$and` (all parts hold) or `$or` (any part holds)."""

    op: str
    parts: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Negated:
    part: Node


Node = Condition | Combined | Negated


def conditions(node: Node) -> Iterator[Condition]:
    """Every condition of the tree, left to right."""
    if isinstance(node, Condition):
        yield node
    elif isinstance(node, Combined):
        for part in node.parts:
            yield from conditions(part)
    else:
        yield from conditions(node.part)


def equalities(node: Node | None) -> tuple[tuple[str, Scalar], ...] | None:
    """The (metadata key, value) pairs of a filter made only of metadata equalities
    (what the simplest stores can push down); None when it holds anything else."""
    if node is None:
        return ()
    parts = node.parts if isinstance(node, Combined) and node.op == "$and" else (node,)
    pairs = []
    for part in parts:
        if not isinstance(part, Condition) or part.op != "$eq" or part.own:
            return None
        if isinstance(part.value, Instant | tuple):
            return None
        pairs.append((part.field, part.value))
    return tuple(pairs)


def as_json(node: Node | None) -> dict[str, Any] | None:
    """The tree in the filter language again (what a feedback record keeps of the filter
    a query ran with); parsing it gives the same tree."""
    if node is None:
        return None
    if isinstance(node, Condition):
        return {node.field: {node.op: _plain(node.value)}}
    if isinstance(node, Combined):
        return {node.op: [as_json(part) for part in node.parts]}
    return {"$not": as_json(node.part)}


def _plain(value: Value) -> Any:
    if isinstance(value, Instant):
        return value.text
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


# -- parsing ------------------------------------------------------------------------


def parse(value: Any, path: str = "filters") -> Node | None:
    """The tree of a request's `filters`; None for an absent or empty filter. A bad
    filter is a 400 naming the path inside it (`filters.$or[1].created_at.$gte`)."""
    if value is None or value == {}:
        return None
    parser = _Parser()
    return parser.node(value, path, 1)


class _Parser:
    def __init__(self) -> None:
        self.count = 0

    def node(self, value: Any, path: str, depth: int) -> Node:
        if depth > MAX_DEPTH:
            raise InvalidRequest(
                path, f"filters nest at most {MAX_DEPTH} levels deep", limit=MAX_DEPTH
            )
        if not isinstance(value, dict) or not value:
            raise InvalidRequest(path, "must be a non-empty object of fields and operators")
        parts = [self.entry(key, item, path, depth) for key, item in sorted(value.items())]
        return parts[0] if len(parts) == 1 else Combined("$and", tuple(parts))

    def entry(self, key: Any, item: Any, path: str, depth: int) -> Node:
        if key in ("$and", "$or"):
            where = f"{path}.{key}"
            if not isinstance(item, list) or not item:
                raise InvalidRequest(where, "must be a non-empty list of filters")
            parts = tuple(self.node(x, f"{where}[{i}]", depth + 1) for i, x in enumerate(item))
            return parts[0] if len(parts) == 1 else Combined(key, parts)
        if key == "$not":
            return Negated(self.node(item, f"{path}.$not", depth + 1))
        if isinstance(key, str) and key.startswith("$"):
            rule = f"unknown operator {key!r} (fields map to operators; combine with "
            raise InvalidRequest(f"{path}.{key}", rule + "$and, $or, $not)", operator=key)
        if not plain_key(key) or key.startswith("$"):
            rule = (
                f"field names must be 1-{KEY_MAX_LENGTH} characters without control "
                "characters (NUL included), quotes or backslashes"
            )
            raise InvalidRequest(path, rule, key=key)
        return self.field(key, item, f"{path}.{key}")

    def field(self, name: str, item: Any, path: str) -> Node:
        if name == ACL_FIELD:
            return self.acl(item, path)
        if not isinstance(item, dict):
            return self.condition(name, "$eq", item, path)
        if not item:
            raise InvalidRequest(path, f"must hold at least one operator ({', '.join(OPERATORS)})")
        parts: list[Node] = []
        for op, operand in sorted(item.items()):
            if op not in OPERATORS:
                rule = f"unknown operator {op!r} (known: {', '.join(OPERATORS)})"
                raise InvalidRequest(f"{path}.{op}", rule, operator=op)
            parts.append(self.condition(name, op, operand, f"{path}.{op}"))
        return parts[0] if len(parts) == 1 else Combined("$and", tuple(parts))

    def acl(self, item: Any, path: str) -> Node:
        """A test of the access list, as `$in` of the principals it names."""
        rule = "takes a principal, {$contains: principal} or {$in: [principals]}"
        if not isinstance(item, dict):
            item = {"$eq": item}
        if len(item) != 1 or next(iter(item)) not in ACL_OPERATORS:
            raise InvalidRequest(path, rule)
        op, operand = next(iter(item.items()))
        where = f"{path}.{op}"
        if op != "$in":
            return self.condition(ACL_FIELD, "$in", [principal(operand, where)], where)
        if not isinstance(operand, list) or not 1 <= len(operand) <= MAX_VALUES:
            raise InvalidRequest(where, f"must be a list of 1 to {MAX_VALUES} principals")
        checked = [principal(each, f"{where}[{i}]") for i, each in enumerate(operand)]
        return self.condition(ACL_FIELD, "$in", checked, where)

    def condition(self, name: str, op: str, operand: Any, path: str) -> Condition:
        self.count += 1
        if self.count > MAX_CONDITIONS:
            raise InvalidRequest(
                "filters",
                f"must hold at most {MAX_CONDITIONS} conditions in all",
                limit=MAX_CONDITIONS,
            )
        return Condition(name, op, operand_of(name, op, operand, path))


def operand_of(name: str, op: str, operand: Any, path: str) -> Value:
    """The checked operand of `op` on field `name`."""
    if op == "$exists":
        if not isinstance(operand, bool):
            raise InvalidRequest(path, "must be true or false")
        return operand
    if op in MEMBERSHIP:
        if not isinstance(operand, list) or not 1 <= len(operand) <= MAX_VALUES:
            rule = f"must be a list of 1 to {MAX_VALUES} values"
            raise InvalidRequest(path, rule, limit=MAX_VALUES)
        return tuple(
            dict.fromkeys(scalar_of(name, x, f"{path}[{i}]") for i, x in enumerate(operand))
        )
    if op == "$contains":
        if name in DATE_FIELDS:
            raise InvalidRequest(path, f"{name} is a date, not words: compare it with $gte, $lt")
        if not isinstance(operand, str) or not operand or " " in operand:
            raise InvalidRequest(path, "must be one word: a non-empty string without spaces")
        return text_of(operand, path)
    if op in RANGES:
        if isinstance(operand, str) and _DATE.fullmatch(operand):
            return instant(operand, path)
        if name in DATE_FIELDS or isinstance(operand, bool) or not isinstance(operand, int | float):
            raise InvalidRequest(path, "must be a number or an ISO 8601 date")
        return number_of(operand, path)
    return scalar_of(name, operand, path)


def scalar_of(name: str, value: Any, path: str) -> Scalar | Instant:
    """A value to compare equal: a string, number or boolean; an instant on a date
    field."""
    if name in DATE_FIELDS:
        if not isinstance(value, str) or not _DATE.fullmatch(value):
            raise InvalidRequest(path, "must be an ISO 8601 date, e.g. 2026-01-31")
        return instant(value, path)
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return number_of(value, path)
    if isinstance(value, str):
        return text_of(value, path)
    raise InvalidRequest(path, "must be a string, number, boolean or an object of operators")


def number_of(value: int | float, path: str) -> int | float:
    if isinstance(value, int):
        within_int64(value, path)
    return value


def text_of(value: str, path: str) -> str:
    without_nul(value, path)
    if len(value) > VALUE_MAX_LENGTH:
        raise InvalidRequest(path, f"must be at most {VALUE_MAX_LENGTH} characters")
    return value


def instant(text: str, path: str) -> Instant:
    millis = millis_of(text)
    if millis is None:
        raise InvalidRequest(path, "must be a valid ISO 8601 date, e.g. 2026-01-31")
    return Instant(millis, text)


def millis_of(text: str) -> int | None:
    """Milliseconds since the epoch of an ISO 8601 date (a bare date: midnight UTC; no
    offset: UTC); None when `text` is not one."""
    if not _DATE.fullmatch(text):
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return round(moment.timestamp() * 1000)


# -- the reference evaluation ---------------------------------------------------------


def matches(node: Node | None, fields: Mapping[str, Any]) -> bool:
    """Whether a passage passes the filter: `fields` holds its metadata and its own
    fields (source_type, source_id, created_at, updated_at), under the field names."""
    if node is None:
        return True
    if isinstance(node, Combined):
        found = (matches(part, fields) for part in node.parts)
        return all(found) if node.op == "$and" else any(found)
    if isinstance(node, Negated):
        return not matches(node.part, fields)
    return holds(node, fields.get(node.field))


def holds(condition: Condition, value: Any) -> bool:
    op, operand = condition.op, condition.value
    if condition.acl:  # `value`: the document's access list
        return not set(condition.values).isdisjoint(value or ())
    if op == "$exists":
        return (value is not None) is operand
    if op in ("$ne", "$nin"):
        positive = Condition(condition.field, "$eq" if op == "$ne" else "$in", operand)
        return not holds(positive, value)
    if value is None:
        return False
    if op == "$eq":
        return equal(value, operand)
    if op == "$in":
        assert isinstance(operand, tuple)
        return any(equal(value, each) for each in operand)
    if op == "$contains":
        return isinstance(value, str) and operand in words(value)
    return ordered(value, operand, op)


def words(value: str) -> list[str]:
    """The words `$contains` looks for in a text: its space-separated parts."""
    return [word for word in value.split(" ") if word]


def equal(value: Any, operand: Any) -> bool:
    if isinstance(operand, Instant):
        millis = millis_of(value) if isinstance(value, str) else None
        return millis is not None and millis == operand.millis
    if isinstance(operand, bool) or isinstance(value, bool):
        return isinstance(operand, bool) and isinstance(value, bool) and value is operand
    if isinstance(operand, int | float):
        return isinstance(value, int | float) and value == operand
    return isinstance(value, str) and value == operand


def ordered(value: Any, operand: Any, op: str) -> bool:
    left: float
    right: float
    if isinstance(operand, Instant):
        millis = millis_of(value) if isinstance(value, str) else None
        if millis is None:
            return False
        left, right = millis, operand.millis
    elif isinstance(value, bool) or not isinstance(value, int | float):
        return False
    else:
        left, right = value, operand
    return {
        "$gt": left > right,
        "$gte": left >= right,
        "$lt": left < right,
        "$lte": left <= right,
    }[op]


# -- for stores that cannot express part of the language -------------------------------


def unsupported(backend: str, operator: str, reason: str = "") -> InvalidRequest:
    """The 400 of a filter a backend cannot push into its own query (never filtered
    after the search instead)."""
    rule = f"the {backend} store cannot apply {operator} in its own query"
    return InvalidRequest(
        "filters", rule + (f": {reason}" if reason else ""), operator=operator, backend=backend
    )


def require_equalities(node: Node | None, backend: str) -> tuple[tuple[str, Scalar], ...]:
    """The metadata equalities of a filter a backend applies only those of; a 400
    naming the first other operator otherwise."""
    pairs = equalities(node)
    if pairs is not None:
        return pairs
    assert node is not None
    raise unsupported(
        backend, first_operator(node) or "$and", "it filters on metadata equality only"
    )


def first_operator(node: Node) -> str:
    """The first part of the tree that is not a metadata equality: an operator, a
    combinator, or the name of a field of the passage's own."""
    if isinstance(node, Negated):
        return "$not"
    if isinstance(node, Combined):
        if node.op == "$or":
            return "$or"
        found = (first_operator(part) for part in node.parts)
        return next((each for each in found if each), "")
    if node.op != "$eq" or isinstance(node.value, Instant | tuple):
        return node.op
    return node.field if node.own else ""
