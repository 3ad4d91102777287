"""A backend's connection as the stores keep it: when one that failed is tried again,
and what requests are told meanwhile."""

from __future__ import annotations

import asyncio
import logging
import time

from knowledge_api.errors import BackendConnectionError

RECONNECT_SECONDS = 5.0
log = logging.getLogger("knowledge_api")


class Reconnect:
    """When a backend that failed to open is tried again: at most every
    RECONNECT_SECONDS, one attempt at a time; in between, requests fail at once with
    the reason it failed. The log says when the reason changes and when it answers
    again, not at every request refused meanwhile."""

    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.error = ""
        self.next_attempt = 0.0
        self.lock = asyncio.Lock()
        self.opened = False

    def attempting(self) -> None:
        self.next_attempt = time.monotonic() + RECONNECT_SECONDS

    def failed(self, error: str) -> BackendConnectionError:
        # the first failure of a store never opened is the service's to report, at start
        if error != self.error and (self.error or self.opened):
            log.warning(
                "store unavailable: %s (trying again at most every %g s)", error, RECONNECT_SECONDS
            )
        self.error = error
        return BackendConnectionError(error, backend=self.backend)

    def succeeded(self) -> None:
        """Connected: a connection lost later may be reopened at once."""
        if self.error:
            log.info("store available again (it failed with: %s)", self.error)
        self.error = ""
        self.next_attempt = 0.0
        self.opened = True

    def check(self) -> None:
        """Fail at once while the last attempt is recent (or still under way)."""
        if time.monotonic() < self.next_attempt:
            reason = self.error or "reconnecting (an attempt is under way)"
            raise BackendConnectionError(f"store unavailable: {reason}", backend=self.backend)


def reason(error: BaseException) -> str:
    """What went wrong, never empty (a timeout's message is)."""
    return str(error) or f"{type(error).__name__} (no message)"
