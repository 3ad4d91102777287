"""A part's step offered on the service under its own name.

The doors say `service.ingest(...)` and `service.start()`; the step lives in the part
that owns it (catalog.py, startup.py, ...). `Step` names the part and the method once,
instead of a method on the service restating the part's signature to call it: the
signature, the docstring and the types stay the part's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

P = ParamSpec("P")
R = TypeVar("R")


class Step(Generic[P, R]):
    """`part`'s method, looked up on the part when called: a part replaced on the
    service (or a method patched on it) applies at once."""

    def __init__(self, part: str, method: Callable[Concatenate[Any, P], R]) -> None:
        self.part = part
        self.name = method.__name__
        self.__doc__ = method.__doc__

    @overload
    def __get__(self, service: None, owner: type) -> Step[P, R]: ...

    @overload
    def __get__(self, service: object, owner: type | None = None) -> Callable[P, R]: ...

    def __get__(self, service: object, owner: type | None = None) -> Any:
        if service is None:
            return self
        method: Callable[P, R] = getattr(getattr(service, self.part), self.name)
        return method

    def __call__(self, service: object, *args: Any, **kwargs: Any) -> R:
        """The step of `service`, as the unbound method on the class would be called."""
        method: Callable[..., R] = self.__get__(service)
        return method(*args, **kwargs)
