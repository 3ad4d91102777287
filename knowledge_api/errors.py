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

    def __init_subclass__(cls, status: int = 0, type: str = "", **kwargs: Any) -> None:
        """A subclass says its status and type where it is declared:
        `class Gone(KnowledgeAPIError, status=410, type="gone")`; either one left out
        is its base's."""
        super().__init_subclass__(**kwargs)
        if status:
            cls.status = status
        if type:
            cls.type = type

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


class ConfigurationError(KnowledgeAPIError, type="configuration_error"):
    """A setting is missing, unknown or invalid; raised at start-up."""


class InvalidRequest(KnowledgeAPIError, status=400, type="invalid_request"):
    """Bad input: the message names the field and the rule it broke."""

    def __init__(self, field: str, rule: str, **details: Any) -> None:
        super().__init__(f"{field}: {rule}", field=field, rule=rule, **details)


class InvalidQuery(InvalidRequest, type="invalid_query"): ...


class NameTaken(InvalidRequest, status=409, type="name_taken"):
    """A name that must be unique (an API key's) is already in use."""


class InvalidJSON(InvalidRequest, type="invalid_json"): ...


class NotFound(KnowledgeAPIError, status=404, type="not_found"): ...


class Unauthorized(KnowledgeAPIError, status=401, type="unauthorized"):
    """No API key, or one that is unknown or revoked."""

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message, **details)
        self.headers = {"WWW-Authenticate": 'Bearer realm="knowledge-api"'}


class Forbidden(KnowledgeAPIError, status=403, type="forbidden"):
    """A known key without the scope or the collection a request needs."""


class MisdirectedRequest(KnowledgeAPIError, status=421, type="misdirected_request"):
    """A Host header the service does not answer to: a page on a rebinding domain
    reaching a service bound to this machine (settings.allowed_hosts)."""


class TryLater(KnowledgeAPIError):
    """A refusal the client may try again after Retry-After seconds."""

    def __init__(self, message: str, retry_after: int, **details: Any) -> None:
        super().__init__(message, retry_after_s=retry_after, **details)
        self.headers = {"Retry-After": str(retry_after)}


class RateLimited(TryLater, status=429, type="rate_limited"): ...


class Overloaded(TryLater, status=503, type="overloaded"):
    """More work is waiting than the service takes on: the client should come back
    after Retry-After seconds instead of queueing without bound."""


class MethodNotAllowed(KnowledgeAPIError, status=405, type="method_not_allowed"): ...


class PayloadTooLarge(KnowledgeAPIError, status=413, type="payload_too_large"): ...


class RequestTimeout(KnowledgeAPIError, status=408, type="request_timeout"): ...


class UnsupportedMediaType(KnowledgeAPIError, status=415, type="unsupported_media_type"): ...


class KnowledgeStoreError(KnowledgeAPIError, status=503, type="store_error"):
    """Base error of KnowledgeStore operations."""


class DocumentNotFoundError(KnowledgeStoreError, status=404, type="document_not_found"): ...


class IndexingError(KnowledgeStoreError, type="indexing_failed"): ...


class SearchError(KnowledgeStoreError, type="search_failed"): ...


class EmbeddingError(KnowledgeStoreError, type="embedding_unavailable"): ...


class BackendConnectionError(KnowledgeStoreError, type="store_unavailable"): ...


class StoreReadOnly(KnowledgeStoreError, status=409, type="store_read_only"):
    """The store serves tables other pipelines own: documents are not written through it."""


class EmbedderMismatchError(ConfigurationError):
    """The store holds vectors of another embedder; mixing vector spaces is refused."""


class AmbiguousDocument(KnowledgeAPIError, status=409, type="ambiguous_document"):
    """A source id that several sources produced a document of: `details.sources` lists
    them, and the lookup names one with `source`."""


class CollectionNotFound(NotFound, type="collection_not_found"):
    """A collection no document is in; the message and `details.available` list those
    that exist, narrowed to the caller's own by `seen_by`."""

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


class ConnectorFailed(KnowledgeAPIError, status=502, type="connector_failed"):
    """The source's service could not be reached, refused the credentials or answered
    nonsense: the run stops and deletes nothing."""
