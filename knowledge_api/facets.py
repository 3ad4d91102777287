"""Facets: how many of a search's matching passages hold each value of a field.

A request names up to MAX_FIELDS fields: metadata keys, or the passage's own
`source_type` and `source_id`. Each is counted over every passage the search's match
set holds (its collection, sources and filter), not over the page of results returned;
the MAX_VALUES most frequent values of a field are kept, ties in value order, and the
number of distinct values says when more were left out.

A value is counted under its text: a string as itself, a number as its shortest JSON
form (`3`, `2.5`: 3 and 3.0 are one value, as the filter language compares them), a
boolean as `true`/`false`. Passages without the field, or with a list or an object
there, are not counted. Every store counts in its own query; `count` here is the
reference they agree with.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from knowledge_api.errors import InvalidRequest
from knowledge_api.validation import KEY_MAX_LENGTH, plain_key

MAX_FIELDS = 8
MAX_VALUES = 100
OWN_FIELDS = ("source_type", "source_id")
"""Fields of the stored passage a facet counts; any other name is a metadata key."""
NOT_COUNTED = ("created_at", "updated_at")
"""The passage's timestamps: nearly one value per passage, nothing to count."""


@dataclass(frozen=True, slots=True)
class FieldCounts:
    """The most frequent values of one field, most frequent first, and how many
    distinct values the match set holds in all (more than `counts` when cut)."""

    counts: tuple[tuple[str, int], ...]
    distinct: int

    @property
    def cut(self) -> bool:
        return self.distinct > len(self.counts)


Facets = dict[str, FieldCounts]


def parse(value: Any, name: str = "facets") -> tuple[str, ...]:
    """The fields a request counts (empty when absent); a bad one is a 400 naming it
    (`facets[1]`) and the rule."""
    if value is None or value == ():
        return ()
    if not isinstance(value, list) or len(value) > MAX_FIELDS:
        raise InvalidRequest(
            name, f"must be a list of at most {MAX_FIELDS} field names", limit=MAX_FIELDS
        )
    fields: list[str] = []
    for i, item in enumerate(value):
        where = f"{name}[{i}]"
        if not plain_key(item):
            rule = (
                f"must be a field name: 1-{KEY_MAX_LENGTH} characters without control "
                "characters, quotes or backslashes"
            )
            raise InvalidRequest(where, rule)
        if item in NOT_COUNTED:
            rule = "names a metadata key, source_type or source_id (timestamps are not counted)"
            raise InvalidRequest(where, rule)
        if item in fields:
            raise InvalidRequest(where, f"names {item!r} a second time")
        fields.append(item)
    return tuple(fields)


def value_key(value: Any) -> str | None:
    """The text a value is counted under; None for what is not counted."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < 2**63 else repr(value)
    if isinstance(value, str):
        return value
    return None


def number_key(text: str) -> str:
    """The key of a number a database gives back as text (`12`, `12.0`, `2.5e3`). An
    integer text beyond 64 bits was a float (no integer that large is stored): 1e300
    comes back from Postgres as 301 digits."""
    if text.lstrip("-").isdigit() and -(2**63) <= int(text) < 2**63:
        return str(int(text))
    found = value_key(float(text))
    assert found is not None
    return found


def top(counter: Mapping[str, int], limit: int = MAX_VALUES) -> FieldCounts:
    """The `limit` most frequent values, ties in value order."""
    ranked = sorted(counter.items(), key=lambda item: (-item[1], item[0]))
    return FieldCounts(tuple(ranked[:limit]), len(ranked))


def merged(groups: Iterable[tuple[str | None, int]], distinct: int | None = None) -> FieldCounts:
    """A store's counts by key (two groups of one key, such as 3 and 3.0, add up), cut to
    MAX_VALUES; `distinct`: the groups the store counted in all, when it cut them."""
    counter: Counter[str] = Counter()
    returned = 0
    for key, n in groups:
        returned += 1
        if key is not None:
            counter[key] += n
    found = top(counter)
    if distinct is None or distinct <= returned:
        return found
    # groups the store cut are taken as distinct values: only those it returned merged
    return FieldCounts(found.counts, distinct - returned + len(counter))


def count(fields: tuple[str, ...], passages: Iterable[Mapping[str, Any]]) -> Facets:
    """The reference: `passages` are the matching passages' fields (metadata and
    source_type, source_id) by name."""
    counters: dict[str, Counter[str]] = {name: Counter() for name in fields}
    for passage in passages:
        for name in fields:
            key = value_key(passage.get(name))
            if key is not None:
                counters[name][key] += 1
    return {name: top(counter) for name, counter in counters.items()}


def unsupported(backend: str, reason: str) -> InvalidRequest:
    """The 400 of a store that cannot count facets in its own query."""
    return InvalidRequest(
        "facets", f"the {backend} store cannot count facets: {reason}", backend=backend
    )
