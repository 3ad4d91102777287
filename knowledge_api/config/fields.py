"""How a setting is declared and read: its variable, default, help and rules in one place.

`setting()` records a `Spec` on a dataclass field. Reading the environment casts each
raw string to the field's type; `problem` then holds each value to its declared rules
and names the variable and the rule it breaks, so a rule is written once, where its
setting is declared, and the documentation is tested against the same declarations.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import Field, dataclass, field
from pathlib import Path
from typing import Any

from knowledge_api.errors import ConfigurationError

ENV_PREFIX = "KNOWLEDGE_"
"""Variables with this prefix must be declared: a typo is refused, not ignored."""


class Secret:
    """A string that never shows its value in repr, str or logs."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def get(self) -> str:
        return self._value

    def __bool__(self) -> bool:
        return bool(self._value)

    def __repr__(self) -> str:
        return "Secret('**********')" if self._value else "Secret('')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


@dataclass(frozen=True)
class Form:
    """A shape a text value may have besides its named choices, and how a message says it."""

    says: str
    fits: Callable[[str], bool]


def is_ratio(value: str) -> bool:
    try:
        return 0 <= float(value) <= 1
    except ValueError:
        return False


RATIO = Form("a number between 0 and 1", is_ratio)


@dataclass(frozen=True)
class Twice:
    """A bound at twice another setting's value."""

    attribute: str


@dataclass(frozen=True)
class Spec:
    """One setting's variable, help and rules; `requires` maps a value of this setting
    to the setting that must then be set."""

    env: str
    help: str
    aliases: tuple[str, ...] = ()
    choices: tuple[str, ...] = ()
    form: Form | None = None
    min: float | Twice | None = None
    max: float | None = None
    positive: bool = False
    requires: Mapping[str, str] = field(default_factory=dict)

    @property
    def names(self) -> tuple[str, ...]:
        """The variable, then the older names read when it is not set."""
        return (self.env, *self.aliases)

    def problem(self, value: Any, settings: Any, envs: Mapping[str, str]) -> str | None:
        """The message for `value` when it breaks a rule, naming the variable and the rule."""
        if rule := self.broken_choice(value) or self.broken_bound(value, settings, envs):
            return f"{self.env} must {rule}"
        needed = self.requires.get(value)
        if needed and not getattr(settings, needed):
            return f"{envs[needed]} must be set when {self.env}={value}"
        return None

    def broken_choice(self, value: Any) -> str | None:
        if not (self.choices or self.form) or value in self.choices:
            return None
        if self.form and self.form.fits(value):
            return None
        named = [choice or "empty" for choice in self.choices]
        return "be " + spoken([*named, *([self.form.says] if self.form else [])])

    def broken_bound(self, value: Any, settings: Any, envs: Mapping[str, str]) -> str | None:
        if self.positive and value <= 0:
            return "be a positive number"
        least, says = self.least(settings, envs)
        if (least is None or value >= least) and (self.max is None or value <= self.max):
            return None
        if self.max is None:
            return "not be negative" if least == 0 else f"be at least {says}"
        return f"be at most {self.max}" if least is None else f"be between {says} and {self.max}"

    def least(self, settings: Any, envs: Mapping[str, str]) -> tuple[float | None, str]:
        """The lowest value allowed, and how a message says it."""
        if isinstance(self.min, Twice):
            return 2 * getattr(settings, self.min.attribute), f"twice {envs[self.min.attribute]}"
        return self.min, f"{self.min}"


def setting(
    env: str,
    default: Any,
    help: str,
    *,
    aliases: tuple[str, ...] = (),
    choices: tuple[str, ...] = (),
    form: Form | None = None,
    min: float | Twice | None = None,
    max: float | None = None,
    positive: bool = False,
    requires: Mapping[str, str] | None = None,
) -> Any:
    """A declared setting: `choices` (and a `form` other values may take), `min`/`max`
    (inclusive) or `positive`, and `requires` are checked at start-up."""
    spec = Spec(env, help, aliases, choices, form, min, max, positive, requires or {})
    return field(default=default, metadata={"spec": spec})


def specs(declared: Iterable[Field[Any]]) -> Iterator[tuple[Field[Any], Spec]]:
    """Each declared field with the spec `setting()` recorded on it."""
    return ((f, f.metadata["spec"]) for f in declared)


def check(settings: Any, declared: Iterable[Field[Any]]) -> None:
    """Refuse the first value that breaks its setting's rules."""
    pairs = list(specs(declared))
    envs = {f.name: spec.env for f, spec in pairs}
    for f, spec in pairs:
        if message := spec.problem(getattr(settings, f.name), settings, envs):
            raise ConfigurationError(message)


def parsed(declared: Iterable[Field[Any]], values: Mapping[str, str]) -> dict[str, Any]:
    """The values given for the declared settings (by variable, then alias), cast to
    each field's type; an unknown `KNOWLEDGE_*` variable is refused with a suggestion."""
    pairs = list(specs(declared))
    reject_unknown(values, {name for _, spec in pairs for name in spec.names})
    found = {}
    for f, spec in pairs:
        given = next((name for name in spec.names if name in values), None)
        if given is not None:
            found[f.name] = cast(given, values[given], type(f.default))
    return found


def reject_unknown(values: Iterable[str], known: set[str]) -> None:
    for name in values:
        if name.startswith(ENV_PREFIX) and name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise ConfigurationError(f"unknown setting {name}{hint}")


def cast(env: str, raw: str, kind: type) -> Any:
    """`raw` as `kind` (int, float, bool, str, Path or Secret: any type built from a string)."""
    try:
        return parse_bool(raw) if kind is bool else kind(raw)
    except ValueError as e:
        raise ConfigurationError(f"{env} must be {kind.__name__}, got {raw!r}") from e


def parse_bool(raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(raw)


def read_env_file(path: str | Path) -> dict[str, str]:
    """KEY=VALUE lines of a dotenv file; a missing file is no error."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    values = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.removeprefix("export ").partition("=")
        values[key.strip()] = value.strip().strip("'\"")
    return values


def spoken(items: list[str]) -> str:
    """`a`, `a or b`, `a, b or c`."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} or {items[-1]}"
