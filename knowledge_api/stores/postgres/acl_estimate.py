"""How many passages a reader's principals allow, estimated from the planner's
statistics of the access lists: the search functions choose by it between the HNSW
graph and the exact search (migration 026), and would otherwise ask the planner in
each search. The statistics change only when the table is analyzed; they are read
again once they are `STATISTICS_SECONDS` old."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass

from knowledge_api.stores.postgres.rows import Row

STATISTICS_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class AclStatistics:
    """`knowledge_acl_statistics`: the passages, the share of them each common
    principal (and collection) holds, and the share taken for any other."""

    passages: float
    principals: Mapping[str, float]
    other_principal: float
    collections: Mapping[str, float]
    other_collection: float

    @classmethod
    def of(cls, rows: list[Row]) -> AclStatistics | None:
        """None when the table has no statistics yet (never analyzed)."""
        if not rows:
            return None
        row = rows[0]
        return cls(
            float(row["passages"]),
            dict(zip(row["principals"], row["principal_shares"], strict=True)),
            float(row["other_principal"]),
            dict(zip(row["collections"], row["collection_shares"], strict=True)),
            float(row["other_collection"]),
        )

    def allowed(self, readers: Iterable[str], searched: Iterable[str]) -> float:
        """The passages of the `searched` collections that `readers` may read: the sum
        of their principals' shares (a passage several of them may read counted for
        each: never fewer than there are), capped at all of them."""
        share = sum(self.principals.get(p, self.other_principal) for p in readers)
        kept = sum(self.collections.get(c, self.other_collection) for c in searched)
        return self.passages * min(share, 1.0) * min(kept, 1.0)


class AclEstimate:
    """The statistics as last read, and when they are read again."""

    def __init__(self) -> None:
        self._statistics: AclStatistics | None = None
        self._expires = 0.0

    async def allowed(
        self,
        read: Callable[[], Awaitable[list[Row]]],
        readers: Iterable[str],
        searched: Iterable[str],
    ) -> float | None:
        """`AclStatistics.allowed`, the statistics `read` again once they are old;
        None without statistics (the search functions then ask the planner)."""
        if time.monotonic() >= self._expires:
            self._statistics = AclStatistics.of(await read())
            self._expires = time.monotonic() + STATISTICS_SECONDS
        if self._statistics is None:
            return None
        return self._statistics.allowed(readers, searched)
