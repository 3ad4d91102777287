"""GET /: the playground, a page to try the service from a browser, and its files.

The page is static (knowledge_api/static/): it holds no data, so it is public even when
keys are required; its own calls to the API carry the key typed into it. It loads
nothing from elsewhere, so a Content-Security-Policy that allows only the service
itself holds it, and no inline script or style is needed.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from starlette.requests import Request
from starlette.responses import Response

from knowledge_api.errors import NotFound
from knowledge_api.web.fields import OneOf

STATIC = Path(__file__).parent.parent / "static"
PAGE = "playground.html"
ASSETS = {
    "playground.js": "text/javascript",
    "playground.css": "text/css",
    "icon.svg": "image/svg+xml",
}
"""The page's files, by name, with their media type."""
ASSET = OneOf("asset", "A script, style sheet or icon of the playground.", allowed=(*ASSETS,))

CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self'",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    )
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    # revalidated on each load, so a new version of the service serves its own files
    "Cache-Control": "no-cache",
}


async def page(request: Request) -> Response:
    return Response(static(PAGE), media_type="text/html", headers=SECURITY_HEADERS)


async def asset(request: Request) -> Response:
    name = request.path_params["asset"]
    if name not in ASSETS:
        raise NotFound(f"no file {name!r} in /playground", allowed=list(ASSETS))
    return Response(static(name), media_type=ASSETS[name], headers=SECURITY_HEADERS)


@cache
def static(name: str) -> bytes:
    """A file of the page, read once."""
    return (STATIC / name).read_bytes()
