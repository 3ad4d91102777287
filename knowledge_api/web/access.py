"""Who may call what: the hosts served, API keys, scopes, collections, rate limits, and
browsers (CORS).

Each route names the scope it needs (routes/__init__.py); `guarded` wraps its handler
so the caller is known before the handler runs. With KNOWLEDGE_AUTH off every caller
may do everything. A key restricted to collections reaches no other one, on any route:
routes ask `access(request).collection(name)` for every collection they touch.
"""

from __future__ import annotations

import ipaddress
import math
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar, cast

from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import Response

from knowledge_api.errors import (
    CollectionNotFound,
    Forbidden,
    MisdirectedRequest,
    RateLimited,
    Unauthorized,
)
from knowledge_api.models import ApiKey
from knowledge_api.principals import DELEGATED_HEADER, held, user_id
from knowledge_api.service import KnowledgeService
from knowledge_api.settings import Settings
from knowledge_api.validation import parses

Handler = Callable[[Request], Awaitable[Response]]


class Asked(Protocol):
    """What a search request carries: its collection, and the principals it reads with."""

    @property
    def collection(self) -> str: ...

    @property
    def principals(self) -> frozenset[str] | None: ...


P = TypeVar("P", bound=Asked)
PUBLIC = "public"
READ, WRITE, ADMIN, DELEGATE = "read", "write", "admin", "delegate"
SCOPES = (READ, WRITE, ADMIN, DELEGATE)
METRICS_SCRAPER = "metrics-token"
WRITES = frozenset(("POST", "PUT", "PATCH", "DELETE"))
"""The methods a page of any site may send without a CORS preflight (a form's POST),
or that change something: a browser's request with them must come from a page the
service accepts (`Origins`)."""
HEADERS = ("Authorization", "X-API-Key", "Content-Type", "X-Request-ID", "X-Knowledge-User")


@dataclass(frozen=True, slots=True)
class Access:
    """A caller: the key's name, what it may do, which collections it may reach, and
    the principals it reads with (knowledge_api.principals)."""

    name: str
    scopes: frozenset[str]
    collections: frozenset[str] | None = None
    """None: every collection."""
    user: str = ""
    """The key's own user id ('' for none)."""
    groups: frozenset[str] = frozenset()
    """The key's own groups."""
    principals: frozenset[str] | None = None
    """What the request may read (None: everything), set once the caller is admitted."""

    def allows(self, scope: str) -> bool:
        return scope == PUBLIC or scope in self.scopes or ADMIN in self.scopes

    def reaches(self, collection: str) -> bool:
        return self.collections is None or collection in self.collections

    def collection(self, name: str) -> str:
        """`name`, if this caller may reach it; 403 otherwise."""
        if not self.reaches(name):
            raise Forbidden(
                f"the key {self.name!r} has no access to the collection {name!r}",
                collection=name,
                key=self.name,
            )
        return name

    def searches(self, names: Iterable[str]) -> None:
        """403 naming the first of `names` this caller may not reach."""
        for name in names:
            self.collection(name)

    def visible(self, names: Iterable[str]) -> list[str]:
        return sorted(name for name in names if self.reaches(name))

    def asking(self, params: P) -> P:
        """`params` of a search in a collection this caller reaches (403 otherwise),
        narrowed to what its principals may read."""
        self.collection(params.collection)
        return cast(P, replace(cast(Any, params), principals=self.principals))


EVERYONE = Access("-", frozenset(SCOPES))
"""The caller when KNOWLEDGE_AUTH is off."""
ANONYMOUS = Access("anonymous", frozenset())


def access(request: Request) -> Access:
    found: Access = getattr(request.state, "access", EVERYONE)
    return found


def guarded(handler: Handler, scope: str) -> Handler:
    """The handler, run once the caller is known and may use the route."""

    async def guard(request: Request) -> Response:
        await authorize(request, scope)
        if request.method in WRITES:
            gate: Gate = request.app.state.gate
            gate.origins.check(
                request.headers, lambda: f"{request.method} {request.url.path[:100]}"
            )
        try:
            return await handler(request)
        except CollectionNotFound as e:  # lists only the collections the caller may reach
            raise e.seen_by(access(request).reaches) from e

    guard.__name__ = getattr(handler, "__name__", "handler")
    return guard


async def authorize(request: Request, scope: str) -> None:
    gate: Gate = request.app.state.gate
    if getattr(request.state, "metrics_token_ok", False):
        # KNOWLEDGE_METRICS_TOKEN, checked by the request observer on GET /metrics only
        gate.hosts.check(request.headers.get("host"))
        request.state.key_name = METRICS_SCRAPER
        return
    client = request.client.host if request.client else "-"
    caller = await admit(gate, request.headers, client, scope)
    request.state.access = caller
    request.state.key_name = caller.name


@dataclass(frozen=True, slots=True)
class Gate:
    """What admission reads of an app, made with it: the hit path (routes/hot.py) holds
    it, routes read it from the app's state once. (Each attribute of a Starlette State
    is found only after a failed lookup: three of them cost a hit more than the rest of
    its admission.)"""

    settings: Settings
    service: KnowledgeService
    """Its key store."""
    limiter: RateLimiter | None
    hosts: TrustedHosts
    origins: Origins
    """The pages whose writes are accepted: the service's own, KNOWLEDGE_CORS_ORIGINS."""
    ratings: RateLimiter | None = None
    """KNOWLEDGE_RATINGS_PER_MINUTE: the ratings each caller may send."""


async def admit(
    gate: Gate,
    headers: Mapping[str, str],
    client: str,
    scope: str,
    collection: str | tuple[str, ...] = "",
    *,
    count_refusals: bool = True,
) -> Access:
    """The caller of a request with these headers, once it names a host the service
    answers to, may use a route that needs `scope` (and reach `collection`, or each of
    several, when named) and the rate limit lets it through; 421, 401, 403 or 429
    otherwise. The one decision of who may call what, for routes and for the hit path
    (routes/hot.py); routes check their collections themselves. A missing or failed key
    counts against the client address's budget (`count_refusals`), so keys cannot be
    guessed faster than the rate limit: 429 once it is spent."""
    gate.hosts.check(headers.get("host"))
    caller = EVERYONE
    limiter = gate.limiter
    try:
        if gate.settings.auth_required:
            service = gate.service
            caller = remembered_caller(service, headers) or await identify(service, headers)
        if caller is ANONYMOUS and scope != PUBLIC:
            raise Unauthorized(
                "an API key is required: send it as Authorization: Bearer kapi_... or X-API-Key"
            )
    except Unauthorized:
        if limiter is not None and count_refusals:
            limiter.take(f"client {client}")
        raise
    if not caller.allows(scope):
        raise Forbidden(
            f"the key {caller.name!r} lacks the {scope!r} scope this route needs",
            scope=scope,
            key=caller.name,
        )
    caller = await reading(gate, caller, headers)
    if collection:
        caller.searches((collection,) if isinstance(collection, str) else collection)
    if limiter is not None:
        limiter.take(budget_of(caller, client))
    return caller


async def reading(gate: Gate, caller: Access, headers: Mapping[str, str]) -> Access:
    """The caller with the principals its request reads with: with X-Knowledge-User
    (a key with the `delegate` scope only: 403 otherwise, before anything is read)
    that user's, never the key's own; else the key's own (`public`, its user, its
    groups and the groups the service knows for its user); everything for an admin
    key (and with KNOWLEDGE_AUTH off)."""
    delegated = headers.get(DELEGATED_HEADER)
    keys = gate.service.keys
    if delegated is not None:
        if not caller.allows(DELEGATE):
            raise Forbidden(
                f"the key {caller.name!r} lacks the {DELEGATE!r} scope: it may not send "
                "X-Knowledge-User",
                scope=DELEGATE,
                key=caller.name,
            )
        user = user_id(delegated.strip(), "X-Knowledge-User")
        return replace(caller, principals=held(user, await keys.groups(user)))
    if caller.allows(ADMIN):
        return caller
    known = await keys.groups(caller.user) if caller.user else ()
    found = readers.get(caller.name)
    if found is not None and found[0] is caller and found[1] is known:
        return found[2]
    if len(readers) >= 1024:
        readers.clear()
    reader = replace(caller, principals=held(caller.user, {*caller.groups, *known}))
    readers[caller.name] = (caller, known, reader)
    return reader


readers: dict[str, tuple[Access, tuple[str, ...], Access]] = {}
"""Each key's caller with its principals, by the key's name, while neither its Access
nor the groups the service knows for its user changed (the same objects, as
`access_of` and the key store's cache hand them on): made again for each request,
they cost a hit about a microsecond."""


def budget_of(caller: Access, client: str) -> str:
    """Whose budget a request spends (rate limits, uploads at once): its key's, or its
    client address's when it has none."""
    keyless = caller is EVERYONE or caller is ANONYMOUS
    return f"client {client}" if keyless else caller.name


def remembered_caller(knowledge: KnowledgeService, headers: Mapping[str, str]) -> Access | None:
    """The caller, when no lookup is needed (no key, or one found in the last few
    seconds): most requests, answered without an await. None: ask `identify`."""
    token = presented_token(headers)
    if not token:
        return ANONYMOUS
    key = knowledge.keys.remembered(token)
    return None if key is None else access_of(key)


async def identify(knowledge: KnowledgeService, headers: Mapping[str, str]) -> Access:
    """The caller of a request that may carry a key (ANONYMOUS without one)."""
    token = presented_token(headers)
    if not token:
        return ANONYMOUS
    key = await knowledge.keys.for_token(token)
    if key is None:
        raise Unauthorized("unknown or revoked API key")
    return access_of(key)


accesses: dict[str, tuple[ApiKey, Access]] = {}
"""Each key's Access, by its hash (a string: hashed once, where an ApiKey is hashed
field by field on every lookup)."""


def access_of(key: ApiKey) -> Access:
    found = accesses.get(key.key_hash)
    if found is not None:
        if found[0] is key:
            return found[1]
        if found[0] == key:  # the same key, read again from the store: kept from now on,
            accesses[key.key_hash] = (key, found[1])  # as comparing costs a request more
            return found[1]
    if len(accesses) >= 1024:
        accesses.clear()
    collections = None if key.collections is None else frozenset(key.collections)
    access = Access(key.name, frozenset(key.scopes), collections, key.user, frozenset(key.groups))
    accesses[key.key_hash] = (key, access)
    return access


def presented_token(headers: Mapping[str, str]) -> str:
    scheme, _, value = headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return headers.get("x-api-key", "").strip()


MAX_BUCKETS = 10_000


class RateLimiter:
    """A token bucket per caller: `per_minute` requests (or `what`) a minute, refilled
    evenly; `setting` names the limit in the refusal."""

    def __init__(
        self,
        per_minute: int,
        clock: Callable[[], float] = time.monotonic,
        what: str = "requests",
        setting: str = "KNOWLEDGE_RATE_LIMIT",
    ) -> None:
        self.per_minute = per_minute
        self.clock = clock
        self.what = what
        self.setting = setting
        self._buckets: dict[str, tuple[float, float]] = {}

    def take(self, caller: str) -> None:
        now = self.clock()
        rate = self.per_minute / 60.0
        tokens, last = self._buckets.get(caller, (float(self.per_minute), now))
        tokens = min(float(self.per_minute), tokens + (now - last) * rate)
        if tokens < 1.0:
            self._buckets[caller] = (tokens, now)
            wait = math.ceil((1.0 - tokens) / rate)
            raise RateLimited(
                f"rate limit of {self.per_minute} {self.what} a minute ({self.setting}) "
                f"reached; retry in {wait} s",
                wait,
            )
        self._buckets[caller] = (tokens - 1.0, now)
        if len(self._buckets) > MAX_BUCKETS:
            self._forget_full(now)

    def _forget_full(self, now: float) -> None:
        """Drop the buckets idle for a minute: they are full again, as a new one is, so
        many callers (client addresses without keys) cannot grow the table forever."""
        self._buckets = {c: b for c, b in self._buckets.items() if now - b[1] < 60.0}


LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
MAX_ANSWERED = 256


@dataclass(frozen=True, slots=True)
class TrustedHosts:
    """The hosts the service answers to, whatever the route (DNS-rebinding protection).

    A page on a domain its owner re-points at 127.0.0.1 (or at any address of a private
    network) reaches the service from the victim's browser as a page of its own origin,
    and the browser sends that domain as the Host. So a Host that is a name must be one
    the service knows: localhost, the bound host, or one of KNOWLEDGE_ALLOWED_HOSTS.
    A Host that is an IP address cannot be rebound (no lookup happens), so it is always
    answered: a probe or a replica addressed by IP, a service bound to 0.0.0.0 reached
    at any of its addresses. A request without Host (HTTP/1.0, no browser) is answered."""

    names: frozenset[str]
    any: bool = False
    answered: set[str] = field(default_factory=set)
    """Host headers checked and answered already (at most MAX_ANSWERED): a cache hit's
    check is one lookup."""

    @classmethod
    def of(cls, settings: Settings) -> TrustedHosts:
        listed = [name.strip() for name in settings.allowed_hosts.split(",") if name.strip()]
        names = {host_name(name) for name in (*LOOPBACK_NAMES, settings.host, *listed)}
        return cls(frozenset(names), "*" in listed)

    def check(self, host: str | None) -> None:
        """Nothing when the service answers to `host` (a Host header); 421 otherwise."""
        if not host or self.any or host in self.answered:
            return
        name = host_name(host)
        if name in self.names or parses(ipaddress.ip_address, name):
            if len(self.answered) < MAX_ANSWERED:
                self.answered.add(host)
            return
        raise MisdirectedRequest(
            f"this service does not answer to the host {name[:100]!r} (DNS-rebinding "
            "protection): call it by an address or a listed name, or add the name to "
            "KNOWLEDGE_ALLOWED_HOSTS",
            host=name[:100],
        )


class Origins:
    """The browser origins a door accepts: pages of localhost and of the bound host
    (any port), the page's own origin (an Origin naming the Host it was sent to: a page
    the service served), and the origins `listed` in the setting named `setting` (`:*`
    for any port, `*` for any origin). Browsers send Origin with every POST, PUT, PATCH
    and DELETE, so a request without it comes from no page of another site, unless its
    Sec-Fetch-Site says cross-site; it is accepted (curl, the SDK, other services)."""

    def __init__(self, settings: Settings, listed: str, setting: str) -> None:
        names = [f"[{n}]" if ":" in n else n for n in (*LOOPBACK_NAMES, settings.host)]
        given = [o.strip() for o in listed.split(",") if o.strip()]
        allowed = [*(f"http://{name}:*" for name in names), *given]
        self.exact = frozenset([*(f"http://{name}" for name in names), *allowed])
        self.any_port = tuple(o[:-1] for o in allowed if o.endswith(":*"))
        self.any = "*" in given
        self.setting = setting

    def check(self, headers: Mapping[str, str], door: str | Callable[[], str]) -> None:
        """Nothing when `door` (`/mcp`, `POST /v1/knowledge/files`) accepts a request
        with these headers; 403 naming the origin and the setting otherwise. (`door` may
        be given as a function, called only to name a refusal: a request's URL costs
        more to make than the rest of the check.)"""
        origin = headers.get("origin")
        if not origin:
            if headers.get("sec-fetch-site", "").lower() == "cross-site":
                raise Forbidden(
                    f"{named(door)} accepts no request from a page of another site "
                    "(Sec-Fetch-Site: cross-site) that does not say its origin",
                    origin=None,
                )
            return
        if self.accepts(origin, headers.get("host", "")):
            return
        raise Forbidden(
            f"{named(door)} accepts no request from pages of {origin[:100]!r}: add the origin "
            f"to {self.setting}",
            origin=origin[:100],
            setting=self.setting,
        )

    def accepts(self, origin: str, host: str) -> bool:
        if self.any or origin in self.exact or origin.startswith(self.any_port):
            return True
        own = origin.partition("://")[2].lower()
        return bool(host) and own == host.lower()


def write_origins(settings: Settings) -> Origins:
    return Origins(settings, settings.cors_origins, "KNOWLEDGE_CORS_ORIGINS")


def host_name(host: str) -> str:
    """The name of a Host header or an allowed-hosts entry, without port (`:*`
    included), brackets or final dot, lowercased."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:].partition("]")[0]
    if host.count(":") == 1:  # name:port (an IPv6 address has more)
        host = host.partition(":")[0]
    return host.rstrip(".")


def rate_limiter(settings: Settings) -> RateLimiter | None:
    return RateLimiter(settings.rate_limit) if settings.rate_limit else None


def ratings_limiter(settings: Settings) -> RateLimiter | None:
    per_minute = settings.ratings_per_minute
    if not per_minute:
        return None
    return RateLimiter(per_minute, what="ratings", setting="KNOWLEDGE_RATINGS_PER_MINUTE")


def caller_name(request: Request) -> str:
    """Whom a limit counts a request against: its key, or its client address when no
    key speaks for it (keys off)."""
    caller = access(request)
    if caller is EVERYONE or caller is ANONYMOUS:
        return f"client {request.client.host if request.client else '-'}"
    return caller.name


def cors(settings: Settings) -> list[Middleware]:
    """Browsers may call from KNOWLEDGE_CORS_ORIGINS; keys travel in headers, never as
    cookies, so credentials are not allowed (which also makes `*` safe)."""
    origins = [o.strip() for o in settings.cors_origins.split(",") if o.strip()]
    if not origins:
        return []
    return [
        Middleware(
            CORSMiddleware,
            allow_origins=origins,
            allow_methods=["GET", "POST", "DELETE", "OPTIONS"],
            allow_headers=list(HEADERS),
            expose_headers=["X-Request-ID", "Retry-After", "WWW-Authenticate"],
            allow_credentials=False,
            max_age=600,
        )
    ]


def named(door: str | Callable[[], str]) -> str:
    return door if isinstance(door, str) else door()
