"""Python clients of a running service: `KnowledgeClient` (blocking) and
`AsyncKnowledgeClient`, one typed method per route, streams included.

An error answered in the service's error shape is raised as the exception of the error
tree that has its type (`CollectionNotFound`, `Unauthorized`, `RateLimited`, ...), with
its message, details and status, so a caller handles it as in process.

    with KnowledgeClient("http://localhost:3006", api_key="kapi_...") as knowledge:
        print(knowledge.answer("How is a query answered?")["answer"])
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import orjson

from knowledge_api import errors

Body = dict[str, Any]
Event = tuple[str, Any]
TIMEOUT = 30.0
URL = "http://127.0.0.1:3006"


def error_types() -> dict[str, type[errors.KnowledgeAPIError]]:
    """Every class of the error tree (knowledge_api.errors) by its `type`."""
    found: dict[str, type[errors.KnowledgeAPIError]] = {}
    pending: list[type[errors.KnowledgeAPIError]] = [errors.KnowledgeAPIError]
    while pending:
        cls = pending.pop(0)
        if cls.__module__ == errors.__name__:
            found.setdefault(cls.type, cls)
        pending.extend(cls.__subclasses__())
    return found


ERRORS = error_types()


def raise_for(response: httpx.Response) -> None:
    """The error tree's exception for an error in the service's shape (any other
    failure as a KnowledgeAPIError with the HTTP status)."""
    if response.status_code < 400:
        return
    try:
        error = orjson.loads(response.read())["error"]
        kind, message, details = error["type"], error["message"], error.get("details", {})
    except (orjson.JSONDecodeError, KeyError, TypeError):
        kind, message, details = "http_error", response.text[:300], {}
    cls = ERRORS.get(kind, errors.KnowledgeAPIError)
    raised = errors.KnowledgeAPIError.__new__(cls)
    errors.KnowledgeAPIError.__init__(raised, message, **details)
    raised.status = response.status_code
    raised.type = kind
    raise raised


def headers_for(api_key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


class EventReader:
    """(event, data) of a text/event-stream, line by line; data decoded from JSON."""

    def __init__(self) -> None:
        self.name = "message"

    def feed(self, line: str) -> Event | None:
        if line.startswith("event: "):
            self.name = line.removeprefix("event: ")
        elif line.startswith("data: "):
            event = (self.name, orjson.loads(line.removeprefix("data: ")))
            self.name = "message"
            return event
        return None


def drop_none(body: Body) -> Body:
    """Fields left out are the service's defaults."""
    return {key: value for key, value in body.items() if value is not None}


class Routes:
    """Every route once: what each method sends. The blocking client answers with the
    body, the async one with an awaitable of it (streams: an iterator of events, or an
    async one)."""

    http_client: Any = None

    def __init__(
        self, base_url: str = URL, api_key: str = "", timeout: float = TIMEOUT, http: Any = None
    ) -> None:
        """`http`: an httpx client of the right kind to send through (a test client)."""
        self.http: Any = http or self.http_client(base_url=base_url, timeout=timeout)
        self.headers = headers_for(api_key)

    def _send(self, method: str, path: str, body: Body | None = None, **params: Any) -> Any:
        raise NotImplementedError

    def _events(self, path: str, body: Body) -> Any:
        raise NotImplementedError

    def health(self) -> Any:
        return self._send("GET", "/health")

    def query(self, query: str, **options: Any) -> Any:
        """Results and a synthesis; options are the body's fields (limit, sources, ...)."""
        return self._send("POST", "/v1/knowledge/query", drop_none({"query": query, **options}))

    def query_stream(self, query: str, **options: Any) -> Any:
        """`results`, `synthesis` deltas (and `reset`), then `done`."""
        return self._events("/v1/knowledge/query", drop_none({"query": query, **options}))

    def answer(self, query: str, **options: Any) -> Any:
        """The grounded AgentResponse: answer, sources, confidence."""
        return self._send("POST", "/v1/knowledge/answer", drop_none({"query": query, **options}))

    def answer_stream(self, query: str, **options: Any) -> Any:
        """`results`, `answer` deltas (and `reset`), then `done` with the AgentResponse."""
        return self._events("/v1/knowledge/answer", drop_none({"query": query, **options}))

    def retrieve(self, query: str, collection: str | None = None, **options: Any) -> Any:
        """The chunks closest to `query` in `collection`, or in `collections=[...]` (an
        option) searched as one."""
        body = drop_none({"query": query, "collection": collection, **options})
        return self._send("POST", "/v1/knowledge/retrieve", body)

    def validate(self, collection: str, test_queries: list[str], **options: Any) -> Any:
        body = drop_none({"collection": collection, "test_queries": test_queries, **options})
        return self._send("POST", "/v1/knowledge/validate", body)

    def support(self, intent: str, message: str, metadata: Body | None = None) -> Any:
        body = {"intent": intent, "message": message, "metadata": metadata or {}}
        return self._send("POST", "/v1/knowledge/support", body)

    def detail(self, source_type: str, key: str, collection: str | None = None) -> Any:
        path = f"/v1/knowledge/detail/{source_type}/{key}"
        return self._send("GET", path, collection=collection)

    def add_documents(self, *documents: Body) -> Any:
        body = documents[0] if len(documents) == 1 else {"documents": list(documents)}
        return self._send("POST", "/v1/knowledge/documents", body)

    def document(self, doc_id: str) -> Any:
        return self._send("GET", f"/v1/knowledge/documents/{doc_id}")

    def delete_document(self, doc_id: str) -> Any:
        return self._send("DELETE", f"/v1/knowledge/documents/{doc_id}")


class KnowledgeClient(Routes):
    http_client = httpx.Client

    def __enter__(self) -> KnowledgeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.http.close()

    def _send(self, method: str, path: str, body: Body | None = None, **params: Any) -> Any:
        response = self.http.request(
            method, path, json=body, params=drop_none(params), headers=self.headers
        )
        raise_for(response)
        return response.json()

    def _events(self, path: str, body: Body) -> Iterator[Event]:
        stream = self.http.stream("POST", path, json={**body, "stream": True}, headers=self.headers)
        reader = EventReader()
        with stream as response:
            raise_for(response)
            for line in response.iter_lines():
                if (event := reader.feed(line)) is not None:
                    yield event


class AsyncKnowledgeClient(Routes):
    http_client = httpx.AsyncClient

    async def __aenter__(self) -> AsyncKnowledgeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.http.aclose()

    async def _send(self, method: str, path: str, body: Body | None = None, **params: Any) -> Any:
        response = await self.http.request(
            method, path, json=body, params=drop_none(params), headers=self.headers
        )
        if response.status_code >= 400:
            await response.aread()
        raise_for(response)
        return response.json()

    async def _events(self, path: str, body: Body) -> AsyncIterator[Event]:
        stream = self.http.stream("POST", path, json={**body, "stream": True}, headers=self.headers)
        async with stream as response:
            if response.status_code >= 400:
                await response.aread()
            raise_for(response)
            reader = EventReader()
            async for line in response.aiter_lines():
                if (event := reader.feed(line)) is not None:
                    yield event
