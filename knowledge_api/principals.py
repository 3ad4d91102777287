"""Who may read a document: its access list (ACL) of principals, and the principals a
caller holds.

A principal is `public`, `user:<id>` (an e-mail address or any stable id) or
`group:<name>` (a connector may qualify it: `group:jira:<project>`). A document's ACL
lists the principals that may read it; a caller reads the documents whose ACL lists one
of its principals. An empty ACL is closed: only a caller that sees everything (an admin
key that does not delegate, principals None) reads it. Documents written without an ACL
are `public`.

The caller's principals reach every store as one more condition of the filter tree
(`acl` `$in` the principals, knowledge_api.filters), so each backend applies them where
it applies filters: in both legs of the search, before the limit.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any, Protocol, TypeVar, cast

from knowledge_api.errors import InvalidRequest
from knowledge_api.filters import ACL_FIELD, Combined, Condition, Node
from knowledge_api.validation import NAME_CHAR, PRINCIPAL_ONE, principal


class Filtered(Protocol):
    """Where a search looks (models.SearchFilters): its filter tree."""

    @property
    def where(self) -> Node | None: ...


F = TypeVar("F", bound=Filtered)

DELEGATED_HEADER = "x-knowledge-user"
"""The header a key with the `delegate` scope names the user it asks for with."""
PUBLIC = "public"
PUBLIC_ACL: tuple[str, ...] = (PUBLIC,)
MAX_PRINCIPALS = 100
GROUP_PATTERN = rf"^{NAME_CHAR}{{1,189}}$"
_GROUP = re.compile(GROUP_PATTERN)
ID_PATTERN = rf"^{NAME_CHAR}{{1,195}}$"
ACL_TEXT_PATTERN = rf"^[ \t]*{PRINCIPAL_ONE}?[ \t]*(?:,[ \t]*{PRINCIPAL_ONE}?[ \t]*)*$"
"""An access list as text: principals separated by commas, spaces and tabs around them."""
_ID = re.compile(ID_PATTERN)


def acl_of(value: Any, path: str = "acl") -> tuple[str, ...]:
    """A written ACL: a list of principals, kept in order without repeats (an empty list
    closes the document)."""
    if not isinstance(value, list) or len(value) > MAX_PRINCIPALS:
        raise InvalidRequest(path, f"must be a list of at most {MAX_PRINCIPALS} principals")
    return tuple(dict.fromkeys(principal(each, f"{path}[{i}]") for i, each in enumerate(value)))


def acl_text(value: str, path: str = "--acl") -> tuple[str, ...]:
    """An ACL given on the command line: comma-separated principals ('' closes)."""
    return acl_of([part.strip(" \t") for part in value.split(",") if part.strip(" \t")], path)


def group_name(value: Any, path: str) -> str:
    if not isinstance(value, str) or not _GROUP.fullmatch(value):
        rule = "must be a group name: 1-189 characters without spaces, commas or control characters"
        raise InvalidRequest(path, rule)
    return value


def groups_of(value: Any, path: str = "groups") -> tuple[str, ...]:
    """A list of group names (without `group:`), in order without repeats."""
    if not isinstance(value, list) or len(value) > MAX_PRINCIPALS:
        raise InvalidRequest(path, f"must be a list of at most {MAX_PRINCIPALS} group names")
    return tuple(dict.fromkeys(group_name(each, f"{path}[{i}]") for i, each in enumerate(value)))


def user_id(value: Any, path: str) -> str:
    """A user's id (an e-mail address or any stable id)."""
    if not isinstance(value, str) or not _ID.fullmatch(value):
        rule = "must be a user id: 1-195 characters without spaces, commas or control characters"
        raise InvalidRequest(path, rule)
    return value


def held(user: str, groups: Iterable[str]) -> frozenset[str]:
    """The principals of a user (empty id: none of its own) with these groups."""
    found = {PUBLIC, *(f"group:{group}" for group in groups)}
    if user:
        found.add(f"user:{user}")
    return frozenset(found)


def visible(acl: Sequence[str], principals: frozenset[str] | None) -> bool:
    """Whether a document of this ACL may be read by a caller holding `principals`."""
    return principals is None or not principals.isdisjoint(acl)


def condition(principals: frozenset[str]) -> Condition:
    """The filter condition of the documents readable with `principals`."""
    return Condition(ACL_FIELD, "$in", tuple(sorted(principals)))


def scoped(filters: F, principals: frozenset[str] | None) -> F:
    """`filters` narrowed to what `principals` may read (unchanged for None: sees all)."""
    if principals is None:
        return filters
    return cast(F, replace(cast(Any, filters), where=narrowed(filters.where, principals)))


def narrowed(where: Node | None, principals: frozenset[str] | None) -> Node | None:
    """A filter tree narrowed to what `principals` may read."""
    if principals is None:
        return where
    allowed = condition(principals)
    if where is None:
        return allowed
    return Combined("$and", (allowed, *top_parts(where)))


def acl_split(where: Node | None) -> tuple[list[tuple[str, ...]], Node | None]:
    """The tests of `acl` in the tree's top `$and` (each the principals any one of which
    passes it), and the rest of the tree: for a store that applies them apart."""
    if where is None:
        return [], None
    parts = top_parts(where)
    tests = [part for part in parts if isinstance(part, Condition) and part.acl]
    kept = joined(tuple(part for part in parts if part not in tests))
    return [tuple(test.texts()) for test in tests], kept


def read_as_public(filters: F) -> F | None:
    """`filters` for rows that keep no access list (a database other pipelines fill),
    each of them public: the tests of `acl` in the tree's top `$and` decided (None when
    one excludes `public`: nothing passes), the rest kept."""
    tests, rest = acl_split(filters.where)
    if any(PUBLIC not in test for test in tests):
        return None
    return cast(F, replace(cast(Any, filters), where=rest))


def readers_apart(where: Node | None) -> tuple[Node | None, tuple[str, ...] | None]:
    """The tree without its first test of `acl` at the top, and that test's
    principals (None when there is none): a store that plans a search by how much its
    readers may read takes them apart from the rest of the filter."""
    parts = top_parts(where) if where is not None else ()
    for part in parts:
        if isinstance(part, Condition) and part.acl:
            return joined(tuple(other for other in parts if other is not part)), tuple(part.texts())
    return where, None


def top_parts(where: Node) -> tuple[Node, ...]:
    """The conditions a tree's top `$and` joins (the tree alone when it is no `$and`)."""
    return where.parts if isinstance(where, Combined) and where.op == "$and" else (where,)


def joined(parts: tuple[Node, ...]) -> Node | None:
    """The conditions as one tree: None, the one condition, or their `$and`."""
    return None if not parts else parts[0] if len(parts) == 1 else Combined("$and", parts)


def fingerprint(principals: frozenset[str] | None) -> str:
    """A short hash of the sorted principals, for cache keys ('*': sees everything)."""
    if principals is None:
        return "*"
    joined = "\x1f".join(sorted(principals)).encode()
    return hashlib.blake2b(joined, digest_size=12).hexdigest()
