"""The service every use case goes through: `KnowledgeService` (knowledge.py), what it
holds (engine.py) and its parts (trail.py, catalog.py, startup.py, health.py)."""

from knowledge_api.service.knowledge import (
    COMPUTED,
    Asked,
    Event,
    KnowledgeService,
    Plan,
    Retrieval,
    Served,
)

__all__ = ["COMPUTED", "Asked", "Event", "KnowledgeService", "Plan", "Retrieval", "Served"]
