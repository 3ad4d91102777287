"""Calling a vendor's HTTP API as every connector must: 429 and 503 wait what
`Retry-After` says (clamped to 1-60 s), other 5xx and dropped connections back off
exponentially with jitter, at most `retries` times; 401, 403, 404 and 410 stop the run at
once with the reason (a wrong token or a retired endpoint must not look like an empty
source). The `Authorization` header and every secret stay out of messages and logs.
"""

from __future__ import annotations

import base64
import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

from knowledge_api.errors import ConnectorFailed
from knowledge_api.redaction import Redactor

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
        url = httpx.URL(base_url.rstrip("/"))
        self.where = str(url.copy_with(username=None, password=None))
        """The service as messages name it (never with credentials in its URL)."""
        self.redactor = Redactor(credentials(headers or {}, auth, url))
        """Masks the credentials in what the service says: one may echo the request."""
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
        ConnectorFailed naming the call, the reason and what the service said (its
        credentials masked) when it stops."""
        attempt = 0
        call = f"{method} {self.where}{path}"
        while True:
            response: httpx.Response | None = None
            try:
                response = self.client.request(method, path, **kwargs)
            except httpx.TransportError as e:
                problem = f"{call}: unreachable ({type(e).__name__})"
            else:
                status = response.status_code
                if status < 400:
                    return response
                if status in STOPS:
                    raise self.failed(f"{call}: {STOPS[status]}", response)
                problem = f"{call}: answered {status}"
                if status not in RETRIED:
                    raise self.failed(problem, response)
            if attempt >= self.retries.attempts:
                raise self.failed(problem, response, f", {attempt + 1} tries")
            delay = self.retries.wait(response, attempt)
            log.info("%s; trying again in %.1f s", problem, delay)
            self.retries.sleep(delay)
            attempt += 1

    def failed(
        self, problem: str, response: httpx.Response | None, tries: str = ""
    ) -> ConnectorFailed:
        said = service_message(response) if response is not None else ""
        return ConnectorFailed(self.redactor.text(problem + (f": {said}" if said else "") + tries))

    def get_json(self, path: str, params: Mapping[str, Any] | None = None) -> Any:
        response = self.request("GET", path, params=params)
        try:
            return response.json()
        except ValueError as e:
            raise ConnectorFailed(f"GET {self.where}{path}: the answer is not JSON") from e

    def close(self) -> None:
        self.client.close()


MESSAGE_LENGTH = 300
CREDENTIAL_HEADERS = ("authorization", "cookie", "token", "key", "secret", "auth")
"""Words of the names of headers that carry credentials."""


def service_message(response: httpx.Response) -> str:
    """What a service says of its error: its JSON `message`, `error`, `errorMessages`
    (Jira) or `error_description`, shortened; "" when it says nothing readable."""
    try:
        body = response.json()
    except ValueError:
        return ""
    if not isinstance(body, dict):
        return ""
    for key in ("message", "errorMessages", "error_description", "error"):
        value = body.get(key)
        if isinstance(value, list):
            value = "; ".join(str(item) for item in value)
        if isinstance(value, str) and value.strip():
            return " ".join(value.split())[:MESSAGE_LENGTH]
    return ""


def credentials(
    headers: Mapping[str, str], auth: httpx.Auth | tuple[str, str] | None, url: httpx.URL
) -> list[str]:
    """The secret values a client sends: the value of every header that carries
    credentials and its part after a scheme (`Bearer TOKEN`), a basic auth's password
    and the header made of it, and a password in its URL."""
    found = []
    for name, value in headers.items():
        if any(word in name.lower() for word in CREDENTIAL_HEADERS):
            found += [value, value.partition(" ")[2]]
    if isinstance(auth, tuple):
        basic = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        found += [auth[1], basic]  # the header httpx makes of them
    if url.password:
        found.append(url.password)
    return [value for value in found if value]
