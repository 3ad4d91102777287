"""What the service and the synthesis chain report as they work: the timings of model
calls, searches and syntheses, and provider failures. The app hands in an observer
that turns them into metrics; without one, nothing is recorded."""

from __future__ import annotations

from typing import Protocol


class Observer(Protocol):
    def embedding(self, kind: str, seconds: float) -> None:
        """A model call: kind is `query` or `documents`."""

    def search(self, seconds: float) -> None: ...

    def synthesis(self, provider: str, seconds: float) -> None:
        """One link's attempt at an answer, failed or not."""

    def provider_failure(self, provider: str) -> None: ...


class Unobserved:
    def embedding(self, kind: str, seconds: float) -> None:
        pass

    def search(self, seconds: float) -> None:
        pass

    def synthesis(self, provider: str, seconds: float) -> None:
        pass

    def provider_failure(self, provider: str) -> None:
        pass


UNOBSERVED = Unobserved()
