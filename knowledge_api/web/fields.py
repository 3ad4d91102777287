"""Request bodies declared once: each field parses its value (a failure names the field
and the rule, through `validation`) and describes itself as JSON Schema (`web.schema`),
so the same declaration validates a request and documents it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from knowledge_api import filters, validation
from knowledge_api.errors import InvalidRequest
from knowledge_api.web.schema import BOOLEAN, Schema, obj

REQUIRED: Any = validation.REQUIRED


@dataclass(frozen=True)
class Field:
    name: str
    description: str = ""
    default: Any = REQUIRED

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def parse(self, body: dict[str, Any], default: Any) -> Any:
        raise NotImplementedError

    def schema(self) -> Schema:
        raise NotImplementedError

    def described(self) -> Schema:
        schema = self.schema()
        if self.description:
            schema["description"] = self.description
        if not self.required and self.default is not None:
            schema["default"] = self.default
        return schema


@dataclass(frozen=True)
class Text(Field):
    max_length: int = 1000
    error: type[InvalidRequest] = InvalidRequest
    strip: bool = True

    def parse(self, body: dict[str, Any], default: Any) -> Any:
        value = validation.text(
            body, self.name, max_length=self.max_length, default=default, error=self.error
        )
        return value.strip() if self.strip else value

    def schema(self) -> Schema:
        text = {"type": "string", "maxLength": self.max_length}
        no_nul = {"pattern": validation.NO_NUL_PATTERN}
        if not self.required:
            return {**text, **no_nul}
        # blank is refused as missing: at least one character `str.strip` keeps
        blank = {"pattern": validation.NOT_BLANK_PATTERN}
        return {**text, "minLength": 1, "allOf": [blank, no_nul]}


@dataclass(frozen=True)
class Number(Field):
    low: float = 0.0
    high: float = 1.0

    def parse(self, body: dict[str, Any], default: Any) -> Any:
        return validation.number(body, self.name, low=self.low, high=self.high, default=default)

    def schema(self) -> Schema:
        return {"type": "number", "minimum": self.low, "maximum": self.high}


@dataclass(frozen=True)
class Integer(Number):
    def parse(self, body: dict[str, Any], default: Any) -> Any:
        low, high = int(self.low), int(self.high)
        return validation.integer(body, self.name, low=low, high=high, default=default)

    def schema(self) -> Schema:
        return {**super().schema(), "type": "integer"}


@dataclass(frozen=True)
class Boolean(Field):
    def parse(self, body: dict[str, Any], default: Any) -> Any:
        return validation.boolean(body, self.name, default=default)

    def schema(self) -> Schema:
        return {"type": "boolean"}


@dataclass(frozen=True)
class Date(Field):
    """An optional ISO 8601 date or instant, kept in UTC to the second ("" when absent
    or null)."""

    default: Any = None
    null: bool = True
    """JSON null is taken as absent (a form field has no null: there it is text)."""

    def parse(self, body: dict[str, Any], default: Any) -> Any:
        return validation.date(body, self.name)

    def schema(self) -> Schema:
        kind = ["string", "null"] if self.null else "string"
        return {"type": kind, "pattern": filters.DATE_PATTERN}


@dataclass(frozen=True)
class Choices(Field):
    """An optional list of values from `allowed` (None when absent); a value named
    twice counts once, so the schema does not demand unique items."""

    allowed: tuple[str, ...] = ()

    def parse(self, body: dict[str, Any], default: Any) -> Any:
        return validation.choices(body, self.name, allowed=self.allowed)

    def schema(self) -> Schema:
        items = {"type": "string", "enum": list(self.allowed)}
        # null is taken as absent
        return {"type": ["array", "null"], "items": items, "minItems": 1}


@dataclass(frozen=True)
class OneOf(Field):
    allowed: tuple[str, ...] = ()

    def parse(self, body: dict[str, Any], default: Any) -> Any:
        return validation.one_of(body, self.name, allowed=self.allowed, default=default)

    def schema(self) -> Schema:
        return {"type": "string", "enum": list(self.allowed)}


@dataclass(frozen=True)
class Scalars(Field):
    """An object of string, number or boolean values (metadata, filters); as sorted
    (key, value) pairs when `pairs`, so it can be part of a cache key."""

    pairs: bool = False

    def parse(self, body: dict[str, Any], default: Any) -> Any:
        values = validation.scalar_mapping(body, self.name)
        return tuple(sorted(values.items())) if self.pairs else values

    def schema(self) -> Schema:
        key = {
            "minLength": 1,
            "maxLength": validation.KEY_MAX_LENGTH,
            "pattern": validation.METADATA_KEY_PATTERN,
        }
        scalar = {"type": ["string", "number", "boolean"], "pattern": r"^[^\u0000]*$"}
        return {"type": "object", "propertyNames": key, "additionalProperties": scalar}


FILTER_REF = "#/components/schemas/Filter"


@dataclass(frozen=True)
class Filters(Field):
    """A filter of the one filter language (knowledge_api.filters), parsed into its
    tree: field -> value or {operator: value}, combined with $and, $or, $not."""

    def parse(self, body: dict[str, Any], default: Any) -> Any:
        if self.name not in body:
            return default
        value = body[self.name]
        if not isinstance(value, dict):
            raise InvalidRequest(self.name, "must be an object of fields and operators")
        return filters.parse(value, self.name)

    def schema(self) -> Schema:
        return {"$ref": FILTER_REF}


def filter_schema() -> Schema:
    """The filter language as JSON Schema with its limits (the count of conditions in
    all and the depth, which a schema cannot state, are in its description)."""
    scalar: Schema = {"type": ["string", "number", "boolean"], "pattern": r"^[^\u0000]*$"}
    values = {"type": "array", "items": scalar, "minItems": 1, "maxItems": filters.MAX_VALUES}
    ranged = {
        "anyOf": [{"type": "number"}, {"type": "string", "pattern": filters.DATE_PATTERN}],
        "description": "A number or an ISO 8601 date.",
    }
    operators = obj(
        {},
        {
            "$eq": scalar,
            "$ne": scalar,
            **{op: ranged for op in filters.RANGES},
            "$in": values,
            "$nin": values,
            "$exists": BOOLEAN,
            "$contains": {"type": "string", "minLength": 1},
        },
    )
    # inside $and/$or/$not a filter holds something: `{}` is "no filter" at the top only
    part: Schema = {"allOf": [{"$ref": FILTER_REF}], "minProperties": 1}
    nested = {"type": "array", "items": part, "minItems": 1}
    field = r'[^$\u0000-\u001f\u007f"\\][^\u0000-\u001f\u007f"\\]*'
    return {
        "type": "object",
        "description": (
            "Field -> value (equality) or {operator: value}; $and/$or/$not combine filters. "
            f"At most {filters.MAX_CONDITIONS} conditions in all, nested at most "
            f"{filters.MAX_DEPTH} levels deep, at most {filters.MAX_VALUES} values in $in/$nin."
        ),
        "propertyNames": {
            "maxLength": validation.KEY_MAX_LENGTH,
            "pattern": f"^({field}|\\$and|\\$or|\\$not)$",
        },
        "properties": {"$and": nested, "$or": nested, "$not": part},
        "additionalProperties": {"anyOf": [scalar, {**operators, "minProperties": 1}]},
    }


@dataclass(frozen=True)
class CollectionName(Field):
    def parse(self, body: dict[str, Any], default: Any) -> Any:
        if default is REQUIRED:
            value = validation.text(body, self.name, max_length=64)
        else:
            value = body.get(self.name, default)
        return validation.collection_name(value, self.name)

    def schema(self) -> Schema:
        return {"type": "string", "pattern": validation.COLLECTION_PATTERN}


MAX_COLLECTIONS = 10
"""The most collections one request searches as one."""


@dataclass(frozen=True)
class CollectionNames(Field):
    """1-10 collection names searched as one (sorted, each once), instead of the one of
    the field `single`: naming both is a 400 that names both fields."""

    single: str = "collection"
    """The field it may not be sent with ("": none, where it overrides another)."""

    def parse(self, body: dict[str, Any], default: Any) -> Any:
        if self.name not in body:
            return ()
        value = body[self.name]
        if self.single and self.single in body:
            raise InvalidRequest(
                self.name,
                f"cannot be sent with {self.single!r}: name one collection in "
                f"{self.single!r} or several in {self.name!r}",
                fields=[self.single, self.name],
            )
        return collection_names(value, self.name)

    def schema(self) -> Schema:
        item = {"type": "string", "pattern": validation.COLLECTION_PATTERN}
        return {"type": "array", "items": item, "minItems": 1, "maxItems": MAX_COLLECTIONS}


def collection_names(value: Any, field: str) -> tuple[str, ...]:
    """1-10 collection names, sorted, each once."""
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_COLLECTIONS:
        raise InvalidRequest(
            field, f"must be a list of 1-{MAX_COLLECTIONS} collection names", value=value
        )
    return tuple(sorted({validation.collection_name(name, field) for name in value}))


@dataclass(frozen=True)
class Custom(Field):
    """A field with rules of its own: `check(value)` returns the parsed value or raises
    InvalidRequest; `shape` is its JSON Schema."""

    check: Callable[[Any], Any] = lambda value: value
    shape: Schema = field(default_factory=dict)

    def parse(self, body: dict[str, Any], default: Any) -> Any:
        value = body.get(self.name, default)
        if value is REQUIRED:
            raise InvalidRequest(self.name, "is required")
        return self.check(value)

    def schema(self) -> Schema:
        return dict(self.shape)


class Body:
    """A JSON object with declared fields; unknown fields are refused, so a typo is a 400
    and not a silent default. `alternatives` are other bodies the route also takes (one
    document instead of a batch of them): documented, parsed by the route itself."""

    def __init__(
        self,
        name: str,
        *fields: Field,
        alternatives: tuple[Body, ...] = (),
        media_type: str = "application/json",
        others_ignored: bool = False,
    ) -> None:
        self.name = name
        self.fields = fields
        self.alternatives = alternatives
        self.media_type = media_type
        """How the body is sent: JSON, or a form's fields and files."""
        self.others_ignored = others_ignored
        """Unknown fields are ignored, not refused: a body a foreign client sends with
        fields of its own (OpenAI's temperature, n, user ...)."""

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    def parse(
        self, payload: Any, where: str = "body", defaults: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """The fields' values by name; `defaults` overrides declared defaults (a default
        that depends on the running service, such as the answer threshold)."""
        body = validation.require_object(payload, where)
        if not self.others_ignored:
            validation.reject_unknown(body, self.names)
        overrides = defaults or {}
        return {f.name: f.parse(body, overrides.get(f.name, f.default)) for f in self.fields}

    def schema(self) -> Schema:
        found: Schema = {
            "type": "object",
            "title": self.name,
            "properties": {f.name: f.described() for f in self.fields},
            "required": [f.name for f in self.fields if f.required],
            "additionalProperties": self.others_ignored,
        }
        apart = [
            [f.single, f.name]
            for f in self.fields
            if isinstance(f, CollectionNames) and f.single in self.names
        ]
        if apart:  # fields that may not be sent together
            found["not"] = {"anyOf": [{"required": pair} for pair in apart]}
        return found
