"""The Synthesizer protocol: a short answer to a query from the hits that answer it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from knowledge_api.models import SearchHit


@dataclass(frozen=True, slots=True)
class Synthesis:
    text: str
    model: str
    citations: list[int] = field(default_factory=list)
    """1-based positions in the hits of every [n] the text contains."""


class Synthesizer(Protocol):
    name: str

    async def synthesize(self, query: str, hits: Sequence[SearchHit]) -> Synthesis: ...

    def health(self) -> dict[str, Any]: ...
