"""Checks of JSON request fields; each failure names the field and the rule."""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Callable, Collection
from datetime import UTC, datetime
from typing import Any

from knowledge_api.errors import InvalidRequest

REQUIRED: Any = object()
"""The default of a field that must be given."""
WHITESPACE = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
)
"""What `str.strip` takes for blank (Python's whitespace: \\s of a JSON Schema pattern
differs, with \\x1c-\\x1f and \\x85 out and \\ufeff in), as the inside of a class."""
NOT_BLANK_PATTERN = "[^" + WHITESPACE.encode("unicode_escape").decode("ascii") + "]"
"""A JSON Schema pattern for text that is not blank the way `text` sees it."""
NO_NUL_PATTERN = "^[^\\u0000]*$"
"""A JSON Schema pattern for text without the NUL character, as `text` takes it."""
COLLECTION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
_COLLECTION = re.compile(COLLECTION_PATTERN.strip("^$"))
COLLECTION_RULE = "must be 1-64 letters, digits, '_', '-' or '.', starting with a letter or digit"
PRINCIPAL_MAX_LENGTH = 200
NAME_CHAR = r"[^\x00-\x20\x7f-\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff,]"
"""A character of a user id, group name or principal: no whitespace, control character
or comma, the same set to Python and to JSON Schema (whose `\\s` are not the same)."""
PRINCIPAL_ONE = rf"(?:public|(?:user|group):{NAME_CHAR}{{1,194}})"
PRINCIPAL_PATTERN = rf"^{PRINCIPAL_ONE}$"
_PRINCIPAL = re.compile(PRINCIPAL_PATTERN)
PRINCIPAL_RULE = (
    "must be 'public', 'user:<id>' or 'group:<name>' (no spaces, commas or control "
    f"characters, at most {PRINCIPAL_MAX_LENGTH} characters)"
)


def principal(value: Any, path: str) -> str:
    """`value`, checked as one principal of an access list (knowledge_api.principals);
    a 400 naming `path` otherwise."""
    if not isinstance(value, str) or not _PRINCIPAL.fullmatch(value):
        raise InvalidRequest(path, PRINCIPAL_RULE)
    return value


def parses(parse: Callable[[str], object], value: str) -> bool:
    """Whether `parse` (`uuid.UUID`, `ipaddress.ip_address` ...) takes `value`."""
    try:
        parse(value)
    except ValueError:
        return False
    return True


def require_object(payload: Any, field: str = "body") -> dict[str, Any]:
    if not isinstance(payload, dict):
        raise InvalidRequest(field, "must be a JSON object")
    return payload


def reject_unknown(payload: dict[str, Any], allowed: Collection[str]) -> None:
    unknown = sorted(set(payload) - set(allowed))
    if unknown:
        raise InvalidRequest(unknown[0], f"is not a known field (known: {', '.join(allowed)})")


def text(
    payload: dict[str, Any],
    field: str,
    *,
    max_length: int,
    default: Any = REQUIRED,
    error: type[InvalidRequest] = InvalidRequest,
) -> str:
    value = payload.get(field, default)
    if value is REQUIRED:
        raise error(field, "is required")
    if not isinstance(value, str):
        raise error(field, "must be a string")
    if not value.strip() and default is REQUIRED:
        raise error(field, "must not be empty or whitespace")
    if len(value) > max_length:
        raise error(field, f"must be at most {max_length} characters", length=len(value))
    return without_nul(value, field, error)


def without_nul(value: str, field: str, error: type[InvalidRequest] = InvalidRequest) -> str:
    """The text, refused when it holds a NUL: Postgres keeps none in a text, and SQLite's
    JSON paths end at it, so one store or another would fail on it."""
    if "\x00" in value:
        raise error(field, "must not contain the NUL character")
    return value


def integer(payload: dict[str, Any], field: str, *, low: int, high: int, default: int) -> int:
    """An integer; 15.0 is one, as JSON Schema has it (JSON has only numbers)."""
    value = payload.get(field, default)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequest(field, f"must be an integer between {low} and {high}")
    check_int64(value, field)
    if not low <= value <= high:
        raise InvalidRequest(field, f"must be between {low} and {high}", value=value)
    return value


def number(
    payload: dict[str, Any], field: str, *, low: float, high: float, default: float
) -> float:
    value = payload.get(field, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidRequest(field, f"must be a number between {low} and {high}")
    check_int64(value, field)
    if not low <= value <= high:
        raise InvalidRequest(field, f"must be between {low} and {high}", value=value)
    return float(value)


def boolean(payload: dict[str, Any], field: str, *, default: bool) -> bool:
    value = payload.get(field, default)
    if not isinstance(value, bool):
        raise InvalidRequest(field, "must be true or false")
    return value


def one_of(
    payload: dict[str, Any], field: str, *, allowed: Collection[str], default: Any = REQUIRED
) -> str:
    """One value of `allowed`."""
    value = text(payload, field, max_length=64, default=default)
    if value not in allowed:
        raise InvalidRequest(field, f"must be one of: {', '.join(allowed)}")
    return value


def choices(
    payload: dict[str, Any], field: str, *, allowed: Collection[str]
) -> tuple[str, ...] | None:
    """An optional list of distinct values from `allowed`; None when absent."""
    value = payload.get(field)
    if value is None:
        return None
    if not isinstance(value, list) or not value:
        raise InvalidRequest(field, f"must be a non-empty list of: {', '.join(allowed)}")
    for item in value:
        if item not in allowed:
            raise InvalidRequest(
                field, f"unknown value {item!r} (allowed: {', '.join(allowed)})", value=item
            )
    return tuple(sorted(set(value)))


INT64 = 2**63
INT64_RULE = f"must be an integer within the signed 64-bit range ({-INT64} to {INT64 - 1})"
KEY_MAX_LENGTH = 200
KEY_PATTERN = '^[^\\u0000-\\u001f\\u007f"\\\\]{1,' + str(KEY_MAX_LENGTH) + "}$"
"""A metadata or filter key, as a JSON Schema pattern."""
_PLAIN_KEY = re.compile(KEY_PATTERN.strip("^$"))


def plain_key(key: Any) -> bool:
    """A key every store can hold and filter on: 1-200 characters without control
    characters, quotes or backslashes."""
    return isinstance(key, str) and _PLAIN_KEY.fullmatch(key) is not None


def within_int64(value: int, field: str) -> int:
    """An integer every store keeps exactly: within signed 64 bits, else a 400."""
    if not -INT64 <= value < INT64:
        raise InvalidRequest(
            field, "must be an integer within 64 bits (-2^63 to 2^63-1)", value=str(value)
        )
    return value


METADATA_KEY_PATTERN = (
    '^[^$\\u0000-\\u001f\\u007f"\\\\][^\\u0000-\\u001f\\u007f"\\\\]{0,'
    + str(KEY_MAX_LENGTH - 1)
    + "}$"
)
"""A metadata key, as a JSON Schema pattern: a plain key (KEY_PATTERN) that does not
start with `$`, which the filter language keeps for its operators."""


def scalar_mapping(payload: dict[str, Any], field: str) -> dict[str, Any]:
    """An object of string, number or boolean values, each storable and filterable
    everywhere: keys of 1-200 characters without control characters, quotes or
    backslashes, not starting with `$` (a filter could not name them), finite numbers
    (Chroma fails every filtered query of a collection holding a NaN), integers within
    64 bits (-0.0 is read as 0.0)."""
    value = payload.get(field, {})
    if not isinstance(value, dict):
        raise InvalidRequest(field, "must be an object")
    for key, item in value.items():
        if not isinstance(key, str) or not _PLAIN_KEY.fullmatch(key) or key.startswith("$"):
            rule = (
                f"keys must be 1-{KEY_MAX_LENGTH} characters without control characters (NUL "
                "included), quotes or backslashes, not starting with '$'"
            )
            raise InvalidRequest(field, rule, key=str(key)[:KEY_MAX_LENGTH])
        if not isinstance(item, str | int | float | bool) or item is None:
            raise InvalidRequest(f"{field}.{key}", "must be a string, number or boolean")
        if isinstance(item, float) and not math.isfinite(item):
            raise InvalidRequest(f"{field}.{key}", "must be a finite number (not NaN or infinity)")
        check_int64(item, f"{field}.{key}")
        if isinstance(item, str):
            without_nul(item, f"{field}.{key}")
    # -0.0 is kept as 0.0 on every backend: Postgres's jsonb has no negative zero
    return {
        key: 0.0 if item == 0 and isinstance(item, float) else item for key, item in value.items()
    }


def is_int64(value: Any) -> bool:
    """Whether `value` is not an integer, or one every backend stores exactly."""
    return not isinstance(value, int) or isinstance(value, bool) or -INT64 <= value < INT64


def check_int64(value: Any, field: str) -> None:
    """Refuse the first integer outside the signed 64-bit range in `value`, nested
    objects and lists included, naming its path (`field.key[0]`)."""
    stack = [(value, field)]
    while stack:
        item, path = stack.pop()
        if isinstance(item, dict):
            stack.extend((v, f"{path}.{k}" if path else str(k)) for k, v in item.items())
        elif isinstance(item, list):
            stack.extend((v, f"{path}[{i}]") for i, v in enumerate(item))
        elif not is_int64(item):
            raise InvalidRequest(path or "body", INT64_RULE)


def valid_collection(value: Any) -> bool:
    """A collection name every backend accepts (Qdrant, Chroma, SQL)."""
    return isinstance(value, str) and _COLLECTION.fullmatch(value) is not None


def collection_name(value: Any, field: str = "collection") -> str:
    if not valid_collection(value):
        raise InvalidRequest(field, COLLECTION_RULE, value=value)
    return str(value)


SOURCE_RULE = "must be 1-1000 characters without control characters"
SOURCE_PATTERN = "^[^\\u0000-\\u001f\\u007f]{1,1000}$"
"""A source's name (SOURCE_RULE), as a JSON Schema pattern."""


def source_name(value: Any, field: str = "source") -> str:
    """A source's name: a path, a URL or a word; any text a store keeps as it is."""
    if (
        not isinstance(value, str)
        or not 1 <= len(value) <= 1000
        or any(ord(c) < 32 or ord(c) == 127 for c in value)
    ):
        raise InvalidRequest(field, SOURCE_RULE, value=value)
    return value


SOURCE_ID_MAX_LENGTH = 500
TITLE_MAX_LENGTH = 500
CONTENT_MAX_LENGTH = 60000
"""The longest content POST /v1/knowledge/documents takes in one JSON body; a file's
documents are bounded by KNOWLEDGE_MAX_FILE_CHARS instead."""
DOCUMENT_FIELDS = {
    "source_id": "source_id",
    "content": "content",
    "title": "title",
    "metadata": "metadata",
    "created_at": "created_at",
    "updated_at": "updated_at",
}
DATE_FORM = re.compile(
    r"\d{4}-\d{2}-\d{2}"
    r"(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,6})?)?(?:Z|[+-]\d{2}:\d{2})?)?"
)
"""The ISO 8601 forms taken as dates: a document's, and those filters compare."""
DATE_RULE = "must be an ISO 8601 date, e.g. 2026-01-31 or 2026-01-31T09:30:00Z"


def utc_text(moment: datetime) -> str:
    """An instant as documents keep their dates: UTC to the second
    (`2026-01-31T09:30:00+00:00`); a naive one is taken as UTC."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat(timespec="seconds")


def date(payload: dict[str, Any], field: str, *, default: str = "") -> str:
    """An ISO 8601 date (midnight UTC) or instant (UTC when it names no offset), as
    `utc_text` writes it; `default` when absent or null."""
    value = payload.get(field)
    if value is None:
        return default
    if not isinstance(value, str) or not DATE_FORM.fullmatch(value.strip()):
        raise InvalidRequest(field, DATE_RULE)
    try:
        moment = datetime.fromisoformat(value.strip())
    except ValueError:
        raise InvalidRequest(field, DATE_RULE) from None
    return utc_text(moment)


def document_dates(
    payload: dict[str, Any], created: str = "created_at", updated: str = "updated_at"
) -> dict[str, str]:
    """A document's own dates (when the item was created and last changed where it
    lives), each "" when not given: the store then stamps the write's time."""
    dates = {"created_at": date(payload, created), "updated_at": date(payload, updated)}
    return in_order(dates, updated, created)


def in_order(
    dates: dict[str, Any], updated: str = "updated_at", created: str = "created_at"
) -> dict[str, Any]:
    """`dates` (created_at, updated_at as `date` writes them); an update before the
    creation is refused, naming the field `updated`."""
    first, last = dates.get("created_at"), dates.get("updated_at")
    if first and last and datetime.fromisoformat(last) < datetime.fromisoformat(first):
        raise InvalidRequest(updated, f"must not be before {created}")
    return dates


def document_fields(
    payload: dict[str, Any],
    names: dict[str, str] = DOCUMENT_FIELDS,
    max_content: int | None = CONTENT_MAX_LENGTH,
) -> dict[str, Any]:
    """A document's source_id, content, title, metadata and dates held to the rules of POST
    /v1/knowledge/documents (its declaration, routes/documents.py, is made of these
    checks and limits), read from `payload` under `names` (a JSON-lines record's `_id`
    and `text`): every door that makes documents (the route, uploads, `ingest` of files
    and records) applies them, so none stores what another refuses. A failure names the
    field as the payload does; `max_content` None: content of any length (a file's,
    which KNOWLEDGE_MAX_FILE_CHARS bounds)."""
    longest = max_content if max_content is not None else sys.maxsize
    return {
        "source_id": text(payload, names["source_id"], max_length=SOURCE_ID_MAX_LENGTH).strip(),
        "content": text(payload, names["content"], max_length=longest),
        "title": text(payload, names["title"], max_length=TITLE_MAX_LENGTH, default="").strip(),
        "metadata": scalar_mapping(payload, names["metadata"]),
        **document_dates(payload, names["created_at"], names["updated_at"]),
    }
