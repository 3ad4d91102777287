"""Response declarations: small builders of the JSON Schema of a rendered body (the
request side is `fields`, whose fields describe themselves with these)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Schema = dict[str, Any]

STRING: Schema = {"type": "string"}
INTEGER: Schema = {"type": "integer"}
NUMBER: Schema = {"type": "number"}
BOOLEAN: Schema = {"type": "boolean"}
SCALAR: Schema = {"type": ["string", "number", "boolean"]}
ANY: Schema = {}
"""Any JSON value: a part whose shape belongs to a backend (a store's health report)."""


def obj(
    required: Mapping[str, Schema],
    optional: Mapping[str, Schema] | None = None,
    *,
    extra: bool | Schema = False,
) -> Schema:
    """An object with `required` and `optional` properties; others only when `extra`
    allows them (True, or the schema of their values)."""
    return {
        "type": "object",
        "properties": {**required, **(optional or {})},
        "required": list(required),
        "additionalProperties": extra,
    }


def array(items: Schema, **limits: int) -> Schema:
    """A list of `items`; `limits` such as minItems=1, maxItems=100."""
    return {"type": "array", "items": items, **limits}


def nullable(schema: Schema) -> Schema:
    return {"anyOf": [schema, {"type": "null"}]}


def enum(*values: str) -> Schema:
    return {"type": "string", "enum": list(values)}


def unit(schema: Schema = NUMBER) -> Schema:
    """A score from 0 to 1."""
    return {**schema, "minimum": 0, "maximum": 1}
