"""Support retrieval, KB sync and POST /validate settings."""

from __future__ import annotations

from dataclasses import dataclass

from knowledge_api.config.fields import Form, Secret, setting
from knowledge_api.validation import COLLECTION_RULE, valid_collection

COLLECTION = Form(COLLECTION_RULE.removeprefix("must be "), valid_collection)


@dataclass(frozen=True)
class SupportSettings:
    support_collection: str = setting(
        "KNOWLEDGE_SUPPORT_COLLECTION",
        "support",
        "Collection KB articles are synced into and support retrieval searches.",
        form=COLLECTION,
    )
    support_timeout_ms: float = setting(
        "KNOWLEDGE_SUPPORT_TIMEOUT_MS",
        100.0,
        "Budget of one support retrieval; past it the fallback answer is returned.",
        positive=True,
    )
    support_min_score: float = setting(
        "KNOWLEDGE_SUPPORT_MIN_SCORE",
        0.7,
        "Lowest relevance_score of a consulted source.",
        min=0,
        max=1,
    )
    support_high_score: float = setting(
        "KNOWLEDGE_SUPPORT_HIGH_SCORE",
        0.8,
        "Coverage is high when a source for the intent and product scores at least this.",
        min=0,
        max=1,
    )
    support_related_score: float = setting(
        "KNOWLEDGE_SUPPORT_RELATED_SCORE",
        0.5,
        "With no source, coverage is low (not none) when the best article scores at least this.",
        min=0,
        max=1,
    )
    support_intent_boost: float = setting(
        "KNOWLEDGE_SUPPORT_INTENT_BOOST",
        0.1,
        "Added to the relevance of an article tagged with the request's intent.",
        min=0,
        max=1,
    )
    support_device_boost: float = setting(
        "KNOWLEDGE_SUPPORT_DEVICE_BOOST",
        0.05,
        "Added to the relevance of an article tagged with the request's product.",
        min=0,
        max=1,
    )
    kb_sync_url: str = setting(
        "KNOWLEDGE_KB_SYNC_URL",
        "",
        "Base URL of the host serving GET /api/kb/articles (empty = no periodic sync).",
    )
    kb_sync_token: Secret = setting(
        "KNOWLEDGE_KB_SYNC_TOKEN", Secret(""), "Bearer token sent to the host KB API, if needed."
    )
    kb_sync_interval: float = setting(
        "KNOWLEDGE_KB_SYNC_INTERVAL",
        900.0,
        "Seconds between the service's incremental syncs.",
        positive=True,
    )
    kb_sync_full_every: int = setting(
        "KNOWLEDGE_KB_SYNC_FULL_EVERY",
        24,
        "Every Nth periodic sync is full (also removes articles gone from the host).",
        positive=True,
    )
    prune_max_fraction: float = setting(
        "KNOWLEDGE_PRUNE_MAX_FRACTION",
        0.5,
        "A mirror (ingest --prune, a full KB sync) deleting more than this share of a "
        "source's documents stops unless told to (--allow-mass-delete).",
        min=0,
        max=1,
    )
    sync_interval: float = setting(
        "KNOWLEDGE_SYNC_INTERVAL",
        900.0,
        "Seconds between the service's syncs of each connector source that sets no "
        "`every` of its own; 0: none (only sources with an `every` are synced).",
        min=0,
    )
    sync_overlap: float = setting(
        "KNOWLEDGE_SYNC_OVERLAP",
        600.0,
        "Seconds an incremental connector sync reads before its cursor, so that items a "
        "service's search returned late are not missed.",
        min=0,
    )
    sync_retries: int = setting(
        "KNOWLEDGE_SYNC_RETRIES",
        5,
        "Times a connector's call to its service is tried again (429, 5xx, a dropped "
        "connection) before its run stops.",
        min=0,
        max=20,
    )
    prune_every: float = setting(
        "KNOWLEDGE_PRUNE_EVERY",
        86400.0,
        "Seconds between the prunes of a connector source (every id listed, what the "
        "service no longer has deleted); 0: only `sources sync --full` prunes.",
        min=0,
    )
    kb_sync_page_size: int = setting(
        "KNOWLEDGE_KB_SYNC_PAGE_SIZE",
        100,
        "Articles asked for per page (the `limit` parameter).",
        min=1,
        max=1000,
    )
    kb_sync_timeout: float = setting(
        "KNOWLEDGE_KB_SYNC_TIMEOUT",
        10.0,
        "Seconds one request to the host may take.",
        positive=True,
    )
    validate_min_similarity: float = setting(
        "KNOWLEDGE_VALIDATE_MIN_SIMILARITY",
        0.3,
        "POST /validate: a query's results are relevant when the best similarity reaches this.",
        min=0,
        max=1,
    )
    validate_pass_score: float = setting(
        "KNOWLEDGE_VALIDATE_PASS_SCORE",
        0.7,
        "POST /validate: overall score needed to pass.",
        min=0,
        max=1,
    )
