"""Calling a vendor's HTTP API as every connector must: 429 and 503 wait what
`Retry-After` says (clamped to 1-60 s), other 5xx and dropped connections back off
exponentially with jitter, at most `retries` times; 401, 403, 404 and 410 stop the run at
once with the reason (a wrong token or a retired endpoint must not look like an empty
source). The error's `status` detail is the last answer's status (None for a dropped
connection), for a connector that acts on it (a page asked again smaller). The
`Authorization` header and every secret stay out of messages and logs.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

from knowledge_api.errors import ConnectorFailed

log = logging.getLogger("knowledge_api.connectors")

WAIT_FLOOR, WAIT_CEILING = 1.0, 60.0
"""Bounds of a `Retry-After` the run honours, in seconds."""
BACKOFF_BASE, BACKOFF_CEILING = 0.5, 30.0
STOPS = {
    401: "the credentials were refused (401): check the token and the account it belongs to",
    403: "access was refused (403): the token lacks a scope or the account a permission",
    404: "not found (404): check the URL and the project, space, repository or channel named",
    410: "the endpoint is gone (410): this version of the service retired it",
}
RETRIED = {429, 500, 502, 503, 504}


@dataclass(frozen=True)
class Retries:
    """How often and how long a call is tried again; `sleep` is swapped by tests."""

    attempts: int = 5
    sleep: Callable[[float], None] = time.sleep

    def wait(self, response: httpx.Response | None, attempt: int) -> float:
        """Seconds before try `attempt + 1`: `Retry-After` clamped to 1-60 s on a 429 or
        503 that sends one, else exponential backoff with full jitter."""
        if response is not None and response.status_code in (429, 503):
            after = retry_after(response.headers.get("retry-after", ""))
            if after is not None:
                return min(max(after, WAIT_FLOOR), WAIT_CEILING)
        return random.uniform(0, min(BACKOFF_CEILING, BACKOFF_BASE * 2**attempt))


def retry_after(value: str) -> float | None:
    """A `Retry-After` in seconds (delta seconds or an HTTP date); None when absent or
    unreadable."""
    value = value.strip()
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return when.timestamp() - time.time()


class SourceHTTP:
    """One connector's client to its service: a base URL, headers (credentials
    included) and the retry policy; `get_json` answers the decoded body."""

    def __init__(
        self,
        base_url: str,
        headers: Mapping[str, str] | None = None,
        auth: httpx.Auth | tuple[str, str] | None = None,
        retries: Retries | None = None,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.retries = retries or Retries()
        self.client = httpx.Client(
            base_url=base_url.rstrip("/"),
            headers=dict(headers or {}),
            auth=auth,
            timeout=timeout,
            follow_redirects=True,
            transport=transport,
        )

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """The response to a call, tried again on 429, 5xx and dropped connections;
        ConnectorFailed naming the path and the reason when it stops."""
        attempt = 0
        while True:
            response: httpx.Response | None = None
            try:
                response = self.client.request(method, path, **kwargs)
            except httpx.TransportError as e:
                problem = f"{method} {path}: {type(e).__name__}"
            else:
                status = response.status_code
                if status < 400:
                    return response
                if status in STOPS:
                    raise ConnectorFailed(f"{method} {path}: {STOPS[status]}", status=status)
                if status not in RETRIED:
                    said = " ".join(response.text.split())[:300]
                    raise ConnectorFailed(
                        f"{method} {path}: answered {status}" + (f": {said}" if said else ""),
                        status=status,
                    )
                problem = f"{method} {path}: answered {status}"
            if attempt >= self.retries.attempts:
                last = response.status_code if response is not None else None
                raise ConnectorFailed(f"{problem}, {attempt + 1} tries", status=last)
            delay = self.retries.wait(response, attempt)
            log.info("%s; trying again in %.1f s", problem, delay)
            self.retries.sleep(delay)
            attempt += 1

    def get_json(self, path: str, params: Mapping[str, Any] | None = None) -> Any:
        response = self.request("GET", path, params=params)
        try:
            return response.json()
        except ValueError as e:
            raise ConnectorFailed(f"GET {path}: the answer is not JSON") from e

    def close(self) -> None:
        self.client.close()
