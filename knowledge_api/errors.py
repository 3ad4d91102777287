"""The exception tree. Each class carries its HTTP status and error type, so one
handler turns any of them into the single JSON error shape:

    {"success": false, "error": {"type": ..., "message": ..., "details": {...}}}
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any


class KnowledgeAPIError(Exception):
    status = 500
    type = "internal_error"

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details
        self.headers: dict[str, str] = {}
        """Response headers the error calls for (WWW-Authenticate, Retry-After)."""

    def body(self) -> dict[str, Any]:
        return {
            "success": False,
            "error": {"type": self.type, "message": self.message, "details": self.details},
        }


class ConfigurationError(KnowledgeAPIError):
    """A setting is missing, unknown or invalid; raised at start-up."""

    type = "configuration_error"


class InvalidRequest(KnowledgeAPIError):
    """Bad input: the message names the field and the rule it broke."""

    status = 400
    type = "invalid_request"

    def __init__(self, field: str, rule: str, **details: Any) -> None:
        super().__init__(f"{field}: {rule}", field=field, rule=rule, **details)


class InvalidQuery(InvalidRequest):
    type = "invalid_query"


class InvalidJSON(InvalidRequest):
    type = "invalid_json"


class NotFound(KnowledgeAPIError):
    status = 404
    type = "not_found"


class Unauthorized(KnowledgeAPIError):
    """No API key, or one that is unknown or revoked."""

    status = 401
    type = "unauthorized"

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message, **details)
        self.headers = {"WWW-Authenticate": 'Bearer realm="knowledge-api"'}


class Forbidden(KnowledgeAPIError):
    """A known key without the scope or the collection a request needs."""

    status = 403
    type = "forbidden"


class MisdirectedRequest(KnowledgeAPIError):
    """A Host header the service does not answer to: a page on a rebinding domain
    reaching a service bound to this machine (settings.allowed_hosts)."""

    status = 421
    type = "misdirected_request"


class RateLimited(KnowledgeAPIError):
    status = 429
    type = "rate_limited"

    def __init__(self, message: str, retry_after: int, **details: Any) -> None:
        super().__init__(message, retry_after_s=retry_after, **details)
        self.headers = {"Retry-After": str(retry_after)}


class Overloaded(KnowledgeAPIError):
    """More work is waiting than the service takes on: the client should come back
    after Retry-After seconds instead of queueing without bound."""

    status = 503
    type = "overloaded"

    def __init__(self, message: str, retry_after: int, **details: Any) -> None:
        super().__init__(message, retry_after_s=retry_after, **details)
        self.headers = {"Retry-After": str(retry_after)}


class MethodNotAllowed(KnowledgeAPIError):
    status = 405
    type = "method_not_allowed"


class PayloadTooLarge(KnowledgeAPIError):
    status = 413
    type = "payload_too_large"


class RequestTimeout(KnowledgeAPIError):
    status = 408
    type = "request_timeout"


class UnsupportedMediaType(KnowledgeAPIError):
    status = 415
    type = "unsupported_media_type"


class KnowledgeStoreError(KnowledgeAPIError):
    """Base error of KnowledgeStore operations."""

    status = 503
    type = "store_error"


class DocumentNotFoundError(KnowledgeStoreError):
    status = 404
    type = "document_not_found"


class IndexingError(KnowledgeStoreError):
    type = "indexing_failed"


class SearchError(KnowledgeStoreError):
    type = "search_failed"


class EmbeddingError(KnowledgeStoreError):
    type = "embedding_unavailable"


class BackendConnectionError(KnowledgeStoreError):
    type = "store_unavailable"


class StoreReadOnly(KnowledgeStoreError):
    """The store serves tables other pipelines own: documents are not written through it."""

    status = 409
    type = "store_read_only"


class EmbedderMismatchError(ConfigurationError):
    """The store holds vectors of another embedder; mixing vector spaces is refused."""


class CollectionNotFound(NotFound):
    """A collection no document is in; the message and `details.available` list those
    that exist, narrowed to the caller's own by `seen_by`."""

    type = "collection_not_found"

    @classmethod
    def among(cls, collection: str, available: Iterable[str]) -> CollectionNotFound:
        names = sorted(available)
        listed = ", ".join(names) if names else "none"
        return cls(
            f"no collection {collection!r} (collections: {listed})",
            collection=collection,
            available=names,
        )

    def seen_by(self, reaches: Callable[[str], bool]) -> CollectionNotFound:
        """The same error as a caller who may reach only some collections sees it."""
        available = [name for name in self.details.get("available", ()) if reaches(name)]
        return self.among(str(self.details.get("collection", "")), available)


class ExtractionError(Exception):
    """A file that cannot be turned into text; `reason` goes into the run's summary."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail
