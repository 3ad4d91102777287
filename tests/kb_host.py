"""A real host KB API for the sync tests: a small Starlette app serving
GET /api/kb/articles on a loopback port, with `updated_since`, pagination and failures."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from tests.loopback import serving_app


def article(
    article_id: str,
    title: str,
    content: str,
    intent: list[str],
    device: list[str],
    last_updated: str = "2024-12-15T10:00:00Z",
) -> dict[str, Any]:
    return {
        "id": article_id,
        "title": title,
        "url": f"https://docs.example.com/{article_id}",
        "content": content,
        "metadata": {
            "intent": intent,
            "device": device,
            "last_updated": last_updated,
            "author": "Support Team",
        },
    }


@dataclass
class Host:
    """The host's state: its articles, what it was asked, and whether it fails."""

    articles: list[dict[str, Any]] = field(default_factory=list)
    requests: list[dict[str, str]] = field(default_factory=list)
    fail_status: int = 0
    ignore_offset: bool = False
    authorization: list[str] = field(default_factory=list)
    url: str = ""
    echo_headers: bool = False
    """Fail with an error message that repeats the request's headers, token included."""
    redirect_to: str = ""
    """Answer every request with a 302 to this base URL (another host, say)."""

    async def list_articles(self, request: Request) -> Response:
        params = dict(request.query_params)
        self.requests.append(params)
        self.authorization.append(request.headers.get("authorization", ""))
        if self.redirect_to:
            target = f"{self.redirect_to}{request.url.path}?{request.url.query}"
            return RedirectResponse(target, status_code=302)
        if self.fail_status:
            message = "Knowledge base unavailable"
            if self.echo_headers:
                message += f" (request headers: {dict(request.headers)})"
            body = {"error": "Internal server error", "message": message}
            return JSONResponse(body, status_code=self.fail_status)
        chosen = [a for a in self.articles if matches(a, params)]
        offset, limit = int(params.get("offset", 0)), int(params.get("limit", 100))
        offset = 0 if self.ignore_offset else offset
        return JSONResponse(
            {
                "articles": chosen[offset : offset + limit],
                "total": len(chosen),
                "updated_at": "2025-01-15T10:00:00Z",
            }
        )


def matches(item: dict[str, Any], params: dict[str, str]) -> bool:
    meta = item.get("metadata") or {}
    since = params.get("updated_since")
    return not since or str(meta.get("last_updated", since)) > since


@contextmanager
def serve(host: Host) -> Iterator[Host]:
    app = Starlette(routes=[Route("/api/kb/articles", host.list_articles)])
    with serving_app(app, start_seconds=10, lifespan="off") as url:
        host.url = url
        yield host


def closed_port_url() -> str:
    """A loopback URL nobody listens on: connections are refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"
