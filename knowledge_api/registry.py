"""Name -> implementation registries, one per seam (stores, embedders, synthesizers).

Built-ins register a "module:Class" path, so optional dependencies are imported only
when their backend is chosen; tests and plugins register classes the same way.
"""

from __future__ import annotations

import importlib
from typing import Any, ClassVar, Generic, Self, TypeVar

from knowledge_api.errors import ConfigurationError

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, seam: str, setting: str) -> None:
        self.seam = seam
        self.setting = setting
        self._targets: dict[str, str | type[T]] = {}

    def register(self, name: str, target: str | type[T]) -> None:
        self._targets[name] = target

    def names(self) -> list[str]:
        return sorted(self._targets)

    def resolve(self, name: str) -> type[T]:
        target = self._targets.get(name)
        if target is None:
            raise ConfigurationError(
                f"{self.setting}={name!r} is not a known {self.seam}; "
                f"choose one of: {', '.join(self.names())}"
            )
        if isinstance(target, str):
            module, _, attr = target.partition(":")
            target = getattr(importlib.import_module(module), attr)
            self._targets[name] = target
        return target

    def create(self, name: str, settings: Any, *context: Any) -> T:
        """An instance of `name` from the settings (and what else its seam hands every
        backend, such as the embedder's identity to a store)."""
        created: T = self.resolve(name).from_settings(settings, *context)  # type: ignore[attr-defined]
        return created


def import_extra(module: str, extra: str) -> Any:
    """An optional dependency, or an error that says which extra installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ConfigurationError(
            f"{module} is not installed: pip install 'knowledge-api[{extra}]'", extra=extra
        ) from e


class FromSettings:
    """A backend built from settings: `settings_fields` names, in order and separated by
    spaces, the settings its constructor takes; `configured` adds what else it needs by
    keyword (the search tuning, the embedder's identity a seam hands it)."""

    settings_fields: ClassVar[str] = ""

    @classmethod
    def from_settings(cls, settings: Any, *context: Any) -> Self:
        values = [getattr(settings, name) for name in cls.settings_fields.split()]
        return cls(*values, **cls.configured(settings, *context))

    @classmethod
    def configured(cls, settings: Any, *context: Any) -> dict[str, Any]:
        return {}
