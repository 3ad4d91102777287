"""A connector reads a service where knowledge lives (a mailbox, a Prometheus server)
and hands back documents: those new or changed since its cursor, and the source ids of
everything it can see, so that what the service no longer has is pruned.

A connector source is kept with the store's sources (`SourceInfo.connector`) as the
JSON of `models.ConnectorSource`: its kind, URL, settings, the names of the environment
variables holding its secrets (never their values), its cursor and its last error.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Protocol

from knowledge_api.errors import ConfigurationError, InvalidRequest
from knowledge_api.models import ConnectorSource, Document


@dataclass
class Window:
    """What one run read: the documents new or changed since the cursor it started
    from, and the cursor the next run starts from once they are stored."""

    documents: list[Document]
    cursor: str
    problems: list[str] = field(default_factory=list)
    """Items left out (unreadable), each with its reason: the run goes on without them."""


class Connector(Protocol):
    """One kind of connector, built for a source from its record."""

    kind: ClassVar[str]

    def changed(self, cursor: str) -> Window:
        """The documents updated since `cursor` (everything when it is empty)."""
        ...

    def visible(self) -> set[str]:
        """The source ids of every document the service still has, for pruning."""
        ...

    def close(self) -> None: ...


def secret(source: ConnectorSource, key: str, environ: Mapping[str, str] | None = None) -> str:
    """The value of the secret `key` of `source` from its environment variable ('' when
    the source names none); ConfigurationError naming the variable when it is unset."""
    variable = source.secrets.get(key)
    if not variable:
        return ""
    value = (os.environ if environ is None else environ).get(variable, "")
    if not value:
        raise ConfigurationError(
            f"the secret {key!r} of this source is read from ${variable}, which is not "
            f"set: export {variable}=... where the sync runs"
        )
    return value


COMMON_SETTINGS = ("every",)
"""Settings every kind takes: `every`, how often the service syncs the source."""


def check_settings(
    source: ConnectorSource, settings: tuple[str, ...], secrets: tuple[str, ...]
) -> None:
    """InvalidRequest naming the first setting or secret the kind does not take, or an
    `every` that is not a duration."""
    known = settings + COMMON_SETTINGS
    unknown = sorted(source.settings.keys() - set(known))
    if unknown:
        rule = f"is not a setting of {source.kind}: {', '.join(known)}"
        raise InvalidRequest(f"settings.{unknown[0]}", rule)
    stray = sorted(source.secrets.keys() - set(secrets))
    if stray:
        rule = f"is not a secret of {source.kind}: {', '.join(secrets) or 'none'}"
        raise InvalidRequest(f"secrets.{stray[0]}", rule)
    if "every" in source.settings:
        source.every(0.0)


def split(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]
