"""Every response body, and every log line while the app runs, without configured
secrets (see knowledge_api/redaction.py)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from knowledge_api.redaction import RedactingFilter, Redactor

LOGGERS = ("", "uvicorn", "uvicorn.error", "uvicorn.access")


class RedactSecrets:
    """ASGI middleware: secrets masked in every body sent, streamed ones included (the
    app adds it only when secrets are configured)."""

    def __init__(self, app: ASGIApp, redactor: Redactor) -> None:
        self.app = app
        self.redactor = redactor

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def masked(message: Message) -> None:
            if message["type"] == "http.response.body" and message.get("body"):
                message["body"] = self.redactor.bytes(message["body"])
            await send(message)

        await self.app(scope, receive, masked)


@contextmanager
def redacted_logs(redactor: Redactor) -> Iterator[None]:
    """While the app runs, every handler of the root and uvicorn loggers masks secrets."""
    if not redactor:
        yield
        return
    log_filter = RedactingFilter(redactor)
    handlers = {h for name in LOGGERS for h in logging.getLogger(name).handlers}
    for handler in handlers:
        handler.addFilter(log_filter)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(log_filter)
