"""Calling a vendor's HTTP API as every connector must: 429 and 503 wait what
`Retry-After` says (clamped to 1-60 s), other 5xx and dropped connections back off
exponentially with jitter, at most `retries` times; 401, 403, 404 and 410 stop the run at
once with the reason (a wrong token or a retired endpoint must not look like an empty
source). A 403 or 429 that is a rate limit is no refusal: one with `Retry-After` (GitHub's
secondary limits) waits as a 429 does, and one saying the quota is spent
(`X-RateLimit-Remaining: 0`) waits for `X-RateLimit-Reset` when that comes within the
clamp, else stops the run saying when the quota comes back. A page of a listing that
keeps failing with 5xx is asked for again in halves before the run stops (the error's
`status` detail is the last answer's status, None for a dropped connection). The
`Authorization` header and every secret stay out of messages and logs.
"""

from __future__ import annotations

import base64
import logging
import random
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from functools import partial
from typing import Any, TypeVar

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
SMALLEST_PAGE = 10
"""A failing page is not asked for in halves smaller than this."""
T = TypeVar("T")


@dataclass(frozen=True)
class Retries:
    """How often and how long a call is tried again; `sleep` is swapped by tests."""

    attempts: int = 5
    sleep: Callable[[float], None] = time.sleep

    def wait(self, response: httpx.Response | None, attempt: int) -> float:
        """Seconds before try `attempt + 1`: `Retry-After` clamped to 1-60 s on a 429 or
        503 that sends one (or a rate-limited 403), until a spent quota comes back
        (clamped alike), else exponential backoff with full jitter."""
        if response is None:
            return self.pause(None, "", attempt)
        back = quota_back(response)
        if back is not None:
            return clamped(back)
        return self.pause(response.status_code, response.headers.get("retry-after", ""), attempt)

    def pause(self, status: int | None, after: str, attempt: int) -> float:
        """The same from a status and a `Retry-After` value, for clients that are not
        httpx (Slack's SDK)."""
        if status in (403, 429, 503):
            seconds = retry_after(after)
            if seconds is not None:
                return clamped(seconds)
        return random.uniform(0, min(BACKOFF_CEILING, BACKOFF_BASE * 2**attempt))


def clamped(seconds: float) -> float:
    return min(max(seconds, WAIT_FLOOR), WAIT_CEILING)


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


def rate_limited(response: httpx.Response) -> bool:
    """A 403 or 429 that says the caller went too fast, not that it may not: it sends
    `Retry-After`, says the quota is spent, or (GitHub's secondary limit without a
    header) says "rate limit" in its body."""
    if response.status_code not in (403, 429):
        return False
    if response.headers.get("retry-after") or quota_back(response) is not None:
        return True
    return response.status_code == 429 or "rate limit" in response.text.lower()


def quota_back(response: httpx.Response) -> float | None:
    """Seconds until a spent quota (`X-RateLimit-Remaining: 0`) comes back, from
    `X-RateLimit-Reset` (epoch seconds); None when it is not spent. ConnectorFailed
    when that is later than a run may wait: the next run goes on."""
    if response.headers.get("x-ratelimit-remaining") != "0":
        return None
    try:
        reset = float(response.headers.get("x-ratelimit-reset", ""))
    except ValueError:
        return 0.0
    if reset - time.time() > WAIT_CEILING:
        back = datetime.fromtimestamp(reset, UTC).isoformat(timespec="seconds")
        raise ConnectorFailed(
            f"the rate limit of these credentials is spent until {back} "
            "(X-RateLimit-Reset): the next run goes on from the cursor"
        )
    return max(reset - time.time(), 0.0)


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

    def request(
        self, method: str, path: str, answers: Collection[int] = (), **kwargs: Any
    ) -> httpx.Response:
        """The response to a call, tried again on 429, 5xx and dropped connections;
        ConnectorFailed naming the call, the reason and what the service said (its
        credentials masked) when it stops. A status in `answers` is returned as it is
        (to a crawler, a page's 404 is a page gone, not a wrong URL)."""
        attempt = 0
        call = f"{method} {self.named(path)}"
        while True:
            response: httpx.Response | None = None
            try:
                response = self.client.request(method, path, **kwargs)
            except httpx.TransportError as e:
                problem = f"{call}: unreachable ({type(e).__name__})"
            else:
                status = response.status_code
                if status < 400 or status in answers:
                    return response
                limited = rate_limited(response)
                if status in STOPS and not limited:
                    raise self.failed(f"{call}: {STOPS[status]}", response)
                problem = f"{call}: answered {status}" + (" (rate limited)" if limited else "")
                if status not in RETRIED and not limited:
                    raise self.failed(problem, response)
            if attempt >= self.retries.attempts:
                raise self.failed(problem, response, f", {attempt + 1} tries")
            delay = self.retries.wait(response, attempt)
            log.info("%s; trying again in %.1f s", problem, delay)
            self.retries.sleep(delay)
            attempt += 1

    def named(self, path: str) -> str:
        """A path or URL as messages name it: a path after the service's URL, a whole URL
        (a crawler's next page) as it is, without credentials."""
        url = httpx.URL(path)
        if url.is_absolute_url:
            return str(url.copy_with(username=None, password=None))
        return f"{self.where}{path}"

    def failed(
        self, problem: str, response: httpx.Response | None, tries: str = ""
    ) -> ConnectorFailed:
        said = service_message(response) if response is not None else ""
        return ConnectorFailed(
            self.redactor.text(problem + (f": {said}" if said else "") + tries),
            status=response.status_code if response is not None else None,
        )

    def get_json(self, path: str, params: Mapping[str, Any] | None = None) -> Any:
        response = self.request("GET", path, params=params)
        try:
            return response.json()
        except ValueError as e:
            raise ConnectorFailed(f"GET {self.named(path)}: the answer is not JSON") from e

    def pages(
        self, path: str, params: Mapping[str, Any] | None = None, size: str = "per_page"
    ) -> Iterator[Any]:
        """The decoded body of each page, following the `Link` header's `rel="next"`
        (RFC 8288, as GitHub pages) until a page names none. A page that keeps failing
        with 5xx is asked again smaller (`shrinking`): its `size` parameter halved, and
        its `page` number moved to match."""
        url: str | None = path
        while url is not None:
            count = int(query_of(url, params).get(size, "0") or 0)
            if count:
                asked = partial(self.resized, size, count)
                response, _ = shrinking(asked, url, params or {}, size, count, exact=True)
            else:
                response = self.request("GET", url, params=params)
            params = None  # the next link carries them
            try:
                yield response.json()
            except ValueError as e:
                raise ConnectorFailed(f"GET {url}: the answer is not JSON") from e
            url = response.links.get("next", {}).get("url")

    def resized(self, size: str, count: int, url: str, params: Mapping[str, Any]) -> httpx.Response:
        """A page of `url` (`count` items a page) asked for with the `size` `params`
        say: its first part when that is smaller, its `page` number moved to match."""
        query = query_of(url, params)
        smaller = int(query[size])
        if "page" in query and smaller != count:
            query["page"] = str((int(query["page"]) - 1) * (count // smaller) + 1)
        return self.request("GET", str(httpx.URL(url).copy_with(query=None)), params=query)

    def close(self) -> None:
        self.client.close()


def smaller(error: ConnectorFailed, size: int, exact: bool = False) -> int | None:
    """The size of page to ask for again after a page of `size` kept failing with 5xx
    (a large page can time the server out): half, down to SMALLEST_PAGE; None for
    another error, or a page that small already. An `exact` half (a listing paged by
    page number, whose pages must stay aligned) halves only an even size."""
    status = error.details.get("status")
    if not isinstance(status, int) or status < 500 or size <= SMALLEST_PAGE:
        return None
    if exact:
        return size // 2 if size % 2 == 0 and size // 2 >= SMALLEST_PAGE else None
    return max(SMALLEST_PAGE, size // 2)


def shrinking(
    get: Callable[[str, dict[str, Any]], T],
    path: str,
    params: Mapping[str, Any],
    name: str,
    size: int,
    exact: bool = False,
) -> tuple[T, int]:
    """`get(path, params)` of a page of a listing, `size` items a page (its parameter
    `name`), asked again with pages `smaller` while it keeps failing with 5xx; its
    answer and the size that got it (the listing goes on with it). The last failure
    when no smaller page is left."""
    while True:
        try:
            return get(path, {**params, name: size}), size
        except ConnectorFailed as e:
            half = smaller(e, size, exact)
            if half is None:
                raise
            log.warning("%s; asking again for %d a page", e.message, half)
            size = half


def query_of(url: str, params: Mapping[str, Any] | None) -> dict[str, str]:
    """The query of a call: its URL's, with `params` over it."""
    return {**dict(httpx.URL(url).params), **{k: str(v) for k, v in (params or {}).items()}}


def bearer(token: str) -> dict[str, str]:
    """The headers of a JSON API's calls, the token (if any) as a bearer."""
    headers = {"Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return headers


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
