"""The service's health: each part's report (/health) and what keeps requests from
being served (/readyz)."""

from __future__ import annotations

import time

from knowledge_api import __version__
from knowledge_api.ingest import ocr
from knowledge_api.service.engine import Body, Engine
from knowledge_api.timing import utc_now


class Health:
    """/health and readiness, from what the engine holds."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    async def readiness(self) -> dict[str, str]:
        """Why each part that keeps requests from being served is not ready; empty
        when the store answers and the embedder is loaded."""
        engine = self.engine
        problems = {}
        store = await engine.store.health_check()
        if store.get("status") != "ok":
            problems["store"] = str(store.get("error") or store.get("status"))
        if not engine.embedder_ready:
            problems["embedder"] = "not loaded"
        return problems

    async def health(self) -> Body:
        engine = self.engine
        store = await engine.store.health_check()
        cache = await engine.caches.health()
        embedder = {
            **engine.embedder.health(),
            "query_batches": engine.query_batcher.stats(),
        }
        synthesizer = engine.synthesizer.health()
        reranker = engine.reranker.health()
        extra = {name: report() for name, report in engine.health_reports.items()}
        extra_ok = all(report.get("status") in ("ok", "pending") for report in extra.values())
        replica_down = any(r.get("state") == "down" for r in store.get("replicas", ()))
        if store.get("status") == "unavailable":
            status = "unhealthy"
        elif (
            not extra_ok
            or replica_down
            or any(
                report.get("status") != "ok"
                for report in (store, embedder, synthesizer, reranker, cache)
            )
        ):
            status = "degraded"
        else:
            status = "healthy"
        return {
            "status": status,
            "service": "knowledge-api",
            "version": __version__,
            "cache": engine.caches.stats(),
            "timestamp": utc_now(),
            "uptime_s": round(time.monotonic() - engine.started, 1),
            "store": store,
            "embedder": embedder,
            "synthesizer": synthesizer,
            "reranker": reranker,
            "ingest": ocr.health(),
            **({"seeding": dict(engine.seeding)} if engine.seeding else {}),
            **extra,
        }
