"""knowledge-api serve | ingest | ingest-git | query | sync | eval | keys | migrate(-store)"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import socket
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from knowledge_api import __version__, compose, tracing, validation
from knowledge_api.errors import (
    ConfigurationError,
    InvalidRequest,
    KnowledgeAPIError,
    RequestTimeout,
)
from knowledge_api.ingest.git_source import GitOptions, load_git
from knowledge_api.ingest.loaders import LoadOptions, Skipped, load_paths
from knowledge_api.ingest.progress import progress
from knowledge_api.ledger import MAX_AUDITED_IDS, AuditEntry, changes, local_user
from knowledge_api.logs import configure_logging
from knowledge_api.models import DEFAULT_COLLECTION, SOURCE_TYPES, Document, IndexSummary
from knowledge_api.registry import import_extra
from knowledge_api.rerankers import rerankers
from knowledge_api.service import KnowledgeService
from knowledge_api.settings import Settings
from knowledge_api.stores import stores


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        settings = Settings.from_env()
        # a command's stdout is its output (a token, JSON): its log goes to stderr
        configure_logging(settings, stdout=None if args.run is run_serve else sys.stderr)
        result: int = args.run(settings, args)
        return result
    except (InvalidRequest, ConfigurationError) as e:  # the command or a setting is wrong
        print(f"error: {e.message}", file=sys.stderr)
        return 2
    except KnowledgeAPIError as e:  # the command was right; running it failed
        print(f"error: {e.message}", file=sys.stderr)
        return 1


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="knowledge-api", description=__doc__)
    root.add_argument("--version", action="version", version=f"knowledge-api {__version__}")
    commands = root.add_subparsers(required=True, metavar="COMMAND")

    serve = commands.add_parser("serve", help="run the HTTP service")
    serve.add_argument("--host", help="override KNOWLEDGE_API_HOST")
    serve.add_argument("--port", type=int, help="override KNOWLEDGE_API_PORT")
    serve.set_defaults(run=run_serve)

    ingest = commands.add_parser(
        "ingest", help="index Markdown, text, HTML, PDF, DOCX, PPTX and JSONL files"
    )
    ingest.add_argument("paths", nargs="+", type=Path, metavar="PATH")
    ingest.add_argument(
        "--source-type",
        choices=SOURCE_TYPES,
        help="default: wiki for documents, knowledge for JSONL",
    )
    ingest.add_argument(
        "--meta",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="metadata added to every document (repeatable)",
    )
    ingest.add_argument("--base-url", default="", help="URL prefix of the files' paths")
    ingest.add_argument("--collection", default=DEFAULT_COLLECTION, help="collection to index into")
    source_options(ingest)
    ingest.set_defaults(run=run_ingest)

    history = commands.add_parser("ingest-git", help="index the commits of a git repository")
    history.add_argument("repo", type=Path, metavar="REPO", help="a git working tree or bare clone")
    history.add_argument("--since", help="only commits after this ISO date (e.g. 2026-01-31)")
    history.add_argument("--branch", help="branch or ref to read (default: the one checked out)")
    history.add_argument(
        "--base-url",
        default="",
        metavar="PATTERN",
        help="commit URL pattern, e.g. https://git.example.com/repo/commit/{hash}",
    )
    history.add_argument(
        "--collection", default=DEFAULT_COLLECTION, help="collection to index into"
    )
    source_options(history)
    history.set_defaults(run=run_ingest_git)

    export = commands.add_parser(
        "export", help="write a collection (documents, chunks, vectors) to a JSON lines file"
    )
    export.add_argument("--collection", default=DEFAULT_COLLECTION)
    export.add_argument(
        "--output", required=True, type=Path, metavar="FILE", help="compressed if .gz or .zst"
    )
    export.set_defaults(run=run_export)
    load = commands.add_parser("import", help="read a file `export` wrote into the store")
    load.add_argument("file", type=Path, metavar="FILE")
    load.add_argument("--collection", help="import into this collection (default: the file's)")
    load.set_defaults(run=run_import)

    listed = commands.add_parser("sources", help="the sources: documents and last run of each")
    listed.add_argument("--collection", help="only this collection's")
    listed.set_defaults(run=run_sources)

    query = commands.add_parser("query", help="ask a question: the answer and its sources")
    query.add_argument("text")
    query.add_argument("--limit", type=int, default=5)
    query.add_argument("--sources", default="", help="comma-separated source types")
    query.add_argument("--collection", default=DEFAULT_COLLECTION)
    query.add_argument("--threshold", type=float, help="lowest similarity of a source (0-1)")
    query.add_argument("--no-synthesize", action="store_true", help="the sources only")
    query.add_argument("--json", action="store_true", help="the API's JSON response")
    query.add_argument("--url", default="", help="ask a running service (no model is loaded here)")
    query.add_argument("--api-key", default="", help="the service's API key, with --url")
    query.set_defaults(run=run_query)

    stdio = commands.add_parser(
        "mcp", help="serve the knowledge base to an MCP client over stdin/stdout"
    )
    stdio.set_defaults(run=run_mcp)

    sync = commands.add_parser("sync", help="pull the host's KB articles into the support index")
    sync.add_argument("--from", dest="source", required=True, metavar="URL", help="host base URL")
    sync.add_argument("--full", action="store_true", help="fetch everything, remove what is gone")
    sync.add_argument("--allow-mass-delete", action="store_true", help=MASS_DELETE_HELP)
    sync.set_defaults(run=run_sync)

    evaluate = commands.add_parser(
        "eval", help="retrieval quality, or answer calibration, on a BEIR directory"
    )
    evaluate.add_argument("directory", type=Path, metavar="DIR", nargs="?")
    evaluate.add_argument(
        "--feedback",
        action="store_true",
        help="no DIR: judge by readers' ratings (POST /v1/knowledge/feedback) and score "
        "today's ranking on the rated queries",
    )
    evaluate.add_argument("--since", help="with --feedback: ratings at or after this date")
    evaluate.add_argument("--json", action="store_true", help="print the report as JSON")
    evaluate.add_argument(
        "--answers",
        action="store_true",
        help="answer every judged query, and again from each passage it retrieved alone, and "
        "report how well confidence predicts a relevant first citation (expected calibration "
        "error, precision per level)",
    )
    evaluate.add_argument(
        "--plot",
        type=Path,
        metavar="FILE.png",
        help="with --answers: write a reliability diagram (needs the plot extra)",
    )
    evaluate.add_argument(
        "--collection", default="", help="keep the corpus in this collection (default: temporary)"
    )
    evaluate.add_argument(
        "--reranker",
        choices=[name for name in rerankers.names() if name != "none"],
        help="add a row: hybrid reranked by this reranker (its KNOWLEDGE_RERANK_* settings "
        "apply); without it KNOWLEDGE_RERANKER is not used",
    )
    evaluate.set_defaults(run=run_eval)

    migrate = commands.add_parser(
        "migrate-store", help="copy collections to another store backend, vectors included"
    )
    migrate.add_argument("--from", dest="source", required=True, choices=stores.names())
    migrate.add_argument("--to", dest="target", required=True, choices=stores.names())
    migrate.add_argument(
        "--collection", action="append", default=[], help="copy only this one (repeatable)"
    )
    migrate.add_argument(
        "--to-path",
        type=Path,
        metavar="PATH",
        help="the target's file or folder (sqlite, chroma, qdrant): a backup into a store of "
        "the same backend",
    )
    migrate.set_defaults(run=run_migrate_store)

    keys = commands.add_parser("keys", help="create, list and revoke API keys")
    actions = keys.add_subparsers(required=True, metavar="ACTION")
    create = actions.add_parser("create", help="a new key; its token is printed once, last")
    create.add_argument("--name", required=True)
    create.add_argument("--scopes", required=True, help="comma-separated: read, write, admin")
    create.add_argument(
        "--collections", default="", help="comma-separated collections (default: all)"
    )
    create.set_defaults(run=run_keys_create)
    listing = actions.add_parser("list", help="every key: name, scopes, collections, created")
    listing.set_defaults(run=run_keys_list)
    revoke = actions.add_parser("revoke", help="revoke a key by name")
    revoke.add_argument("name")
    revoke.set_defaults(run=run_keys_revoke)

    trail = commands.add_parser(
        "audit", help="the audit trail of writes, newest first, one JSON object a line"
    )
    trail.add_argument("--limit", default="50", help="entries (1-200, default 50)")
    trail.add_argument("--cursor", help="next_cursor printed after a full page")
    trail.add_argument("--key", help="only this key's writes (or cli:<user>, kb-sync)")
    trail.add_argument("--collection", help="only writes to this collection")
    trail.add_argument("--since", help="at or after this ISO 8601 date or time (UTC)")
    trail.add_argument("--until", help="before this ISO 8601 date or time (UTC)")
    trail.set_defaults(run=run_audit)

    schema = commands.add_parser(
        "migrate", help="apply the Postgres schema migrations to KNOWLEDGE_DATABASE_URL"
    )
    schema.add_argument(
        "--adopt",
        action="store_true",
        help="add to an existing siam_vectors/wiki_documents database only what the service "
        "needs (indexes, knowledge_* functions), recorded for --undo",
    )
    schema.add_argument(
        "--wiki-vectors",
        action="store_true",
        help="give wiki_documents a vector column filled from its TEXT embeddings (resumable)",
    )
    schema.add_argument("--undo", action="store_true", help="take back what --adopt added")
    schema.add_argument("--dry-run", action="store_true", help="print the plan's SQL only")
    schema.add_argument(
        "--batch-size", type=int, default=200, help="wiki pages per transaction (200)"
    )
    schema.set_defaults(run=run_migrate)
    return root


MASS_DELETE_HELP = "delete even more than KNOWLEDGE_PRUNE_MAX_FRACTION of the source"


def source_options(command: argparse.ArgumentParser) -> None:
    command.add_argument("--name", help="the source's name (default: the absolute path)")
    command.add_argument(
        "--prune", action="store_true", help="mirror: delete the documents of files now gone"
    )
    command.add_argument(
        "--dry-run", action="store_true", help="print what would be added, updated, deleted"
    )
    command.add_argument("--allow-mass-delete", action="store_true", help=MASS_DELETE_HELP)


GRACEFUL_SHUTDOWN_S = 8
"""Seconds in-flight requests get to finish after SIGINT or SIGTERM (PM2 waits 10)."""
DRAIN_S = 0.25


def run_serve(settings: Settings, args: argparse.Namespace) -> int:
    from knowledge_api.app import create_app

    settings = settings.replace(host=args.host or settings.host, port=args.port or settings.port)
    app = Draining(create_app(settings))
    config = uvicorn.Config(
        app,
        log_config=None,
        log_level=settings.log_level,
        access_log=False,  # the app logs every request itself, with its id
        interface="asgi3",
        loop="uvloop",
        http=timed_http(settings.header_timeout),
        ws="none",  # no route speaks WebSocket; loading a library for it cost ~50 ms a start
        timeout_keep_alive=settings.keep_alive_timeout,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
    )
    server = ReadyServer(config, ready_message(settings), app)
    try:
        server.run(sockets=[shared_socket(settings.host, settings.port)])
    except SystemExit:  # uvicorn's exit status 3 when the app does not start
        if app.refusal is not None:
            raise app.refusal from None  # said in one line, exit status 2 (see `main`)
        raise
    return 0


def ready_message(settings: Settings) -> str:
    """What `make run` shows once the service answers: where, and one request to try."""
    host = settings.host
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    url = f"http://[{host}]:{settings.port}" if ":" in host else f"http://{host}:{settings.port}"
    key = " -H 'Authorization: Bearer <API key>'" if settings.auth_required else ""
    body = '{"query": "How do I add documents?"}'
    return (
        f"knowledge-api {__version__} is ready at {url}\n"
        f"try: curl -s {url}/v1/knowledge/query -H 'Content-Type: application/json'{key} "
        f"-d '{body}'"
    )


def shared_socket(host: str, port: int) -> socket.socket:
    """Bound with SO_REUSEPORT, so replicas (and a replacement during a reload) listen
    on the same port, the kernel spreading connections among them. It is not listening
    yet: uvicorn listens once the app has started, so no connection waits on a replica
    that cannot answer."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    return sock


class Draining:
    """ASGI wrapper: once the server drains, every response says `Connection: close`.

    A client keeping its connection alive sends its next request on it at any moment;
    closed under it, that request is lost with a reset. Told so in the response it
    gets, the client opens a new connection instead, which only a listening replica
    accepts."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.on = False
        self.refusal: KnowledgeAPIError | None = None
        """Why the app refused to start (a setting, the store's embedder), if it did."""

    def __call__(self, scope: Any, receive: Any, send: Any) -> Awaitable[None]:
        """The app's own coroutine until the server drains: no layer of its own on
        every request (uvicorn is told the interface, as it cannot tell it from this)."""
        if not self.on or scope["type"] != "http":
            if scope["type"] == "lifespan":
                return self.lifespan(scope, receive, send)
            return self.app(scope, receive, send)  # type: ignore[no-any-return]
        return self.closing(scope, receive, send)

    async def lifespan(self, scope: Any, receive: Any, send: Any) -> None:
        """The app's start and stop. A start it refuses is kept for `run_serve` to say
        in one line, instead of the traceback uvicorn would log (Starlette sends it
        while handling the error, so the error is the one being handled)."""

        async def sending(message: dict[str, Any]) -> None:
            error = sys.exc_info()[1]
            if message["type"] == "lifespan.startup.failed" and isinstance(
                error, KnowledgeAPIError
            ):
                self.refusal = error
                message = {**message, "message": ""}
            await send(message)

        await self.app(scope, receive, sending)

    async def closing(self, scope: Any, receive: Any, send: Any) -> None:
        async def closing(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), (b"connection", b"close")]
            await send(message)

        await self.app(scope, receive, closing)


class TimedHttp(HttpToolsProtocol):
    """uvicorn's httptools protocol, with a deadline for a request's headers.

    uvicorn closes a connection idle after a response (`timeout_keep_alive`), but it
    has no deadline for headers: a connection that sends nothing, or sends its header
    lines a few bytes at a time, stayed open for as long as its client liked (200 such
    connections were all open after 75 s). Here a connection must complete a request's
    headers within `header_timeout` seconds of its opening, or of the response before;
    past it, it is answered 408 (when the request had begun) and closed. A request's
    body has its own deadline (KNOWLEDGE_BODY_TIMEOUT, web/http.py)."""

    header_timeout = 10.0
    headers_due: asyncio.TimerHandle | None = None
    begun = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.await_headers()

    def connection_lost(self, exc: Exception | None) -> None:
        self.headers_arrived()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.begun = True

    def on_headers_complete(self) -> None:
        self.headers_arrived()
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.timeout_keep_alive_task is not None:  # idle: the next request's turn
            self.await_headers()

    def await_headers(self) -> None:
        self.headers_arrived()
        self.begun = False
        self.headers_due = self.loop.call_later(self.header_timeout, self.headers_late)

    def headers_arrived(self) -> None:
        if self.headers_due is not None:
            self.headers_due.cancel()
            self.headers_due = None

    def headers_late(self) -> None:
        self.headers_due = None
        if self.transport.is_closing():
            return
        if self.begun:
            message = (
                f"the request's headers did not arrive within {self.header_timeout:g} s "
                "(KNOWLEDGE_HEADER_TIMEOUT)"
            )
            error = RequestTimeout(message, timeout_s=self.header_timeout)
            body = orjson.dumps(error.body())
            self.transport.write(
                b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
                b"connection: close\r\ncontent-length: %d\r\n\r\n%b" % (len(body), body)
            )
        self.transport.close()


def timed_http(header_timeout: float) -> type[TimedHttp]:
    """The protocol class uvicorn makes each connection's protocol from."""
    return type("TimedHttp", (TimedHttp,), {"header_timeout": header_timeout})


class ReadyServer(uvicorn.Server):
    """Says when it listens (to the terminal, and to PM2); on shutdown, lets requests
    already on their way in start, answered as the last of their connection, before
    connections without one are closed."""

    def __init__(
        self, config: uvicorn.Config, ready: str = "", draining: Draining | None = None
    ) -> None:
        super().__init__(config)
        self.ready = ready
        self.draining = draining

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            if self.ready:
                print(self.ready, flush=True)
            tell_pm2_ready()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        # Closing a listening socket resets the connections still in its accept queue,
        # and uvicorn closes every connection that has no request in progress: one
        # accepted just now may have its request in flight. Either way its client would
        # see a reset. So take in what is queued, stop listening, and give those requests
        # a moment to start before the connections still idle are closed.
        queued = self.take_queued(sockets or [])
        for server in self.servers:
            server.close()
        for listener in sockets or []:  # the event loop may listen on a copy of its own
            queued += self.take_queued([listener])
            listener.close()
        if self.draining is not None:
            self.draining.on = True
        loop = asyncio.get_running_loop()
        for connection in queued:
            await loop.connect_accepted_socket(self.new_protocol, connection)
        await asyncio.sleep(DRAIN_S)
        await super().shutdown(sockets)

    def take_queued(self, listeners: list[socket.socket]) -> list[socket.socket]:
        """The connections waiting in the listeners' accept queues, accepted at once (no
        await until the listeners are closed, so the loop serves none of them meanwhile).
        The kernel can still queue one in the microseconds between the last accept and
        the close, and resets it on close, unless `net.ipv4.tcp_migrate_req` is 1: then
        it hands it to another listener of the port (operations.md, "PM2")."""
        loop = asyncio.get_running_loop()
        taken = []
        for listener in listeners:
            if listener.fileno() < 0:
                continue
            loop.remove_reader(listener.fileno())
            listener.setblocking(False)
            while True:
                try:
                    connection, _ = listener.accept()
                except OSError:  # BlockingIOError: the queue is empty
                    break
                connection.setblocking(False)
                taken.append(connection)
        return taken

    def new_protocol(self) -> asyncio.Protocol:
        """The protocol uvicorn gives each connection it accepts."""
        protocol: asyncio.Protocol = self.config.http_protocol_class(  # type: ignore[call-arg]
            config=self.config, server_state=self.server_state, app_state=self.lifespan.state
        )
        return protocol


def tell_pm2_ready() -> None:
    """Send PM2's `ready` message (`wait_ready`) once the server listens. PM2 gives a
    process it forks a Node IPC channel: newline-separated JSON on NODE_CHANNEL_FD."""
    channel = os.environ.get("NODE_CHANNEL_FD", "")
    if channel.isdigit():
        with contextlib.suppress(OSError):
            os.write(int(channel), b'"ready"\n')


def run_ingest(settings: Settings, args: argparse.Namespace) -> int:
    """Files are read and parsed before the model loads, so a wrong path costs nothing.
    Each PATH is a source, mirrored on its own. Exit 1 when some files were skipped,
    after indexing the rest (a skipped file keeps its stored document, even with --prune)."""
    options = LoadOptions(
        source_type=args.source_type,
        collection=validation.collection_name(args.collection, "--collection"),
        metadata=parse_meta(args.meta),
        base_url=args.base_url,
    )
    if args.name and len(args.paths) > 1:
        raise InvalidRequest("--name", "names one source: give a single PATH with it")
    loaded = [(path, load_paths([path], options)) for path in args.paths]
    status, skipped = 0, []
    for path, found in loaded:
        for file in found.skipped:
            detail = f" ({file.detail})" if file.detail else ""
            print(f"skipped {file.path}: {file.reason}{detail}", file=sys.stderr)
        status |= index_documents(
            settings,
            found.documents,
            args.name or str(path.resolve()),
            options.collection,
            args,
            kept=unread_files(path, found.skipped),
        )
        skipped += found.skipped
    if skipped:
        print(skipped_summary(skipped))
        return 1
    return status


def unread_files(path: Path, skipped: list[Skipped]) -> Callable[[str], bool]:
    """Whether a stored document's source id is that of a file this run could not read
    (its source id ends with the file's path, relative or under --base-url)."""
    root = path if path.is_dir() else path.parent
    unread = tuple(Path(file.path).relative_to(root).as_posix() for file in skipped)
    return lambda source_id: bool(unread) and source_id.endswith(unread)


def run_ingest_git(settings: Settings, args: argparse.Namespace) -> int:
    """The commits are listed before the model loads: a bad repository, branch or option
    is an error without loading the model."""
    if args.prune and args.since:
        raise InvalidRequest("--prune", "reads the whole history: it cannot go with --since")
    options = GitOptions(
        since=args.since,
        branch=args.branch,
        base_url=args.base_url,
        collection=validation.collection_name(args.collection, "--collection"),
    )
    source = args.name or str(args.repo.resolve())
    return index_documents(
        settings,
        load_git(args.repo, options),
        source,
        options.collection,
        args,
        command="cli ingest-git",
    )


def index_documents(
    settings: Settings,
    documents: list[Document],
    source: str,
    collection: str,
    args: argparse.Namespace,
    kept: Callable[[str], bool] = lambda source_id: False,
    command: str = "cli ingest",
) -> int:
    """Mirror `documents` as `source` and print the summary line on stdout. What to do is
    asked of the store alone, so a run with nothing new never loads the model."""
    from knowledge_api.usecases import sources

    started = time.perf_counter()
    name = validation.source_name(source, "--name")

    async def run(service: KnowledgeService) -> int:
        plan = await sources.plan_mirror(service, documents, name, collection, args.prune, kept)
        if args.dry_run:
            print("\n".join(plan.lines() or ["nothing to change"]))
            return 0
        plan.check_deletions(settings.prune_max_fraction, args.allow_mass_delete)
        indexing = started
        if plan.changed:
            await service.load_embedder()
            indexing = time.perf_counter()  # the model loaded: chunks/s is the indexing rate
        with progress(total=len(plan.changed), unit="document", desc="indexing") as update:
            report = await sources.mirror(service, plan, update)
        if plan.changed or report.deleted:
            removed = list(plan.deleted)[:MAX_AUDITED_IDS]
            written = changes(plan.changed, report.indexed, removed=report.deleted)
            await service.audit(
                local_user(), command, collection, {**written, "removed_ids": removed}
            )
        deleted = f", {report.deleted} deleted" if args.prune else ""
        print(ingest_summary(report.indexed, report.unchanged, indexing) + deleted)
        return 0

    return with_storage(settings, run)


def run_export(settings: Settings, args: argparse.Namespace) -> int:
    from knowledge_api.stores import transfer

    collection = validation.collection_name(args.collection, "--collection")
    transfer.check_writable(args.output)

    async def write(service: KnowledgeService) -> int:
        if collection not in await service.collections():
            raise InvalidRequest("--collection", f"no collection {collection!r} in the store")
        with progress(total=None, unit="document", desc="exporting") as update:
            done = await transfer.export_collection(
                service.store, service.identity, collection, args.output, update
            )
        print(
            f"{done.documents} documents ({done.chunks} chunks) of {collection} written to "
            f"{args.output}"
        )
        return 0

    return with_storage(settings, write)


def run_import(settings: Settings, args: argparse.Namespace) -> int:
    """Vectors of the configured embedder are stored as they are; others are embedded
    again, which loads the model (and says so)."""
    from knowledge_api.stores import transfer

    collection = args.collection and validation.collection_name(args.collection, "--collection")
    if not args.file.is_file():
        raise InvalidRequest(str(args.file), "no such file")
    with transfer.opened(args.file, "rb") as lines:
        vectors = transfer.read_header(next(iter(lines), b""), args.file)

    async def read(service: KnowledgeService) -> int:
        embed = None
        if vectors != service.identity:
            print(
                f"the file's vectors are of {vectors.name} ({vectors.dimension}-d), the "
                f"store's embedder is {service.identity.name} ({service.identity.dimension}-d): "
                "embedding the documents again",
                file=sys.stderr,
            )
            await service.load_embedder()
            embed = service.embed_documents
        with progress(total=None, unit="document", desc="importing") as update:
            done = await transfer.import_file(
                service.store, service.identity, args.file, collection or None, embed, update
            )
        imported = {"documents": done.documents, "chunks": done.chunks, "embedded": done.embedded}
        await service.audit(local_user(), "cli import", collection or None, imported)
        again = f", {done.embedded} passages embedded again" if embed else ", nothing embedded"
        print(
            f"{done.documents} documents imported ({done.chunks} chunks{again}), "
            f"{done.skipped} unchanged skipped"
        )
        return 0

    return with_storage(settings, read)


def run_sources(settings: Settings, args: argparse.Namespace) -> int:
    from knowledge_api.usecases import sources

    collection = args.collection and validation.collection_name(args.collection, "--collection")

    async def show(service: KnowledgeService) -> int:
        found = await sources.sources(service, collection or None)
        for info in found:
            counted = f"{info.documents} documents\tlast run {info.last_run}"
            print(f"{info.collection}\t{info.name}\t{counted}")
        if not found:
            print("no sources")
        return 0

    return with_storage(settings, show)


def ingest_summary(summary: IndexSummary, unchanged: int, started: float) -> str:
    seconds = time.perf_counter() - started
    return (
        f"{summary.documents} documents indexed ({summary.chunks} chunks, "
        f"{summary.embedded} embedded), {summary.skipped + unchanged} unchanged skipped, "
        f"in {seconds:.1f}s ({summary.chunks / max(seconds, 1e-9):.0f} chunks/s)"
    )


def skipped_summary(skipped: list[Skipped], shown: int = 10) -> str:
    """`3 files skipped: x.png (binary), ...`: the first few by name, the rest counted."""
    names = ", ".join(str(s) for s in skipped[:shown])
    more = f", and {len(skipped) - shown} more" if len(skipped) > shown else ""
    files = "file" if len(skipped) == 1 else "files"
    return f"{len(skipped)} {files} skipped: {names}{more}"


def run_query(settings: Settings, args: argparse.Namespace) -> int:
    payload: dict[str, Any] = {
        "query": args.text,
        "limit": args.limit,
        "synthesize": not args.no_synthesize,
        "collection": args.collection,
    }
    if args.sources:
        payload["sources"] = split(args.sources)
    if args.threshold is not None:
        payload["threshold"] = args.threshold
    from knowledge_api.routes import query as contract
    from knowledge_api.usecases.query import query

    params, _ = contract.parse(payload)  # checked before the model loads
    if args.url:
        from knowledge_api.client import KnowledgeClient

        with KnowledgeClient(args.url, args.api_key) as remote:
            text = payload.pop("query")
            return show(remote.query(text, **payload), args.json)

    async def ask(service: KnowledgeService) -> int:
        return show(contract.render(await query(service, params)), args.json)

    return with_service(settings, ask)


def show(response: dict[str, Any], as_json: bool) -> int:
    if as_json:
        sys.stdout.buffer.write(orjson.dumps(response, option=orjson.OPT_INDENT_2) + b"\n")
    else:
        print(readable(response))
    return 0


def readable(response: dict[str, Any]) -> str:
    """The answer, then its numbered sources: [n] in the answer is source n."""
    lines = []
    if response.get("synthesis"):
        lines += [response["synthesis"], ""]
    results = response["results"]
    lines.append("Sources:" if results else "No source reaches the threshold.")
    for n, result in enumerate(results, start=1):
        meta = result["metadata"]
        where = " > ".join(part for part in (meta.get("title"), meta.get("section")) if part)
        lines.append(f"[{n}] {where or result['source_id']}")
        lines.append(
            f"    {result['source_type']}: {result['source_id']}"
            f"  (similarity {result['similarity']:.2f})"
        )
    lines += [f"warning: {warning}" for warning in response.get("warnings", [])]
    return "\n".join(lines)


def run_sync(settings: Settings, args: argparse.Namespace) -> int:
    from knowledge_api.usecases import kb_sync

    settings = settings.replace(kb_sync_url=args.source)
    return with_service(
        settings,
        lambda service: kb_sync.sync_command(service, args.full, args.allow_mass_delete),
    )


def run_eval(settings: Settings, args: argparse.Namespace) -> int:
    from knowledge_api.usecases import answer_eval, evaluation

    if args.feedback or args.directory is None:
        return run_feedback_eval(settings, args)

    collection = args.collection and validation.collection_name(args.collection, "--collection")
    if args.plot and not args.answers:
        raise InvalidRequest("--plot", "needs --answers (it draws the answers' reliability)")
    if args.plot:
        import_extra("matplotlib", "plot")  # before the corpus is ingested, not after
    # the modes are measured without a reranker; only --reranker loads and runs one
    settings = settings.replace(reranker=args.reranker or "none")

    async def report(service: KnowledgeService) -> int:
        from tqdm import tqdm

        result: evaluation.EvalReport | answer_eval.CalibrationReport
        with tqdm(unit="doc", file=sys.stderr, disable=None) as bar:
            if args.answers:
                result = await answer_eval.evaluate_answers(
                    service, args.directory, collection=collection, progress=bar.update
                )
            else:
                result = await evaluation.evaluate(
                    service,
                    args.directory,
                    collection=collection,
                    progress=bar.update,
                    rerank=bool(args.reranker),
                )
        if args.json:
            sys.stdout.buffer.write(
                orjson.dumps(result.as_json(), option=orjson.OPT_INDENT_2) + b"\n"
            )
        else:
            print(result.table())
        if args.plot and isinstance(result, answer_eval.CalibrationReport):
            answer_eval.plot(result, args.plot)
            print(f"reliability diagram: {args.plot}", file=sys.stderr)
        return 0

    return with_service(settings, report)


def run_feedback_eval(settings: Settings, args: argparse.Namespace) -> int:
    """`eval --feedback`: the rated answers as a judged set, scored with today's ranking
    (KNOWLEDGE_RERANKER included: it is part of today's ranking)."""
    from knowledge_api.routes.audit import moment
    from knowledge_api.usecases import feedback

    if not args.feedback:
        raise InvalidRequest("DIR", "is required (a BEIR directory), or pass --feedback")
    if args.directory is not None or args.answers:
        raise InvalidRequest("--feedback", "takes no DIR and no --answers")
    since = moment("--since")(args.since)

    async def report(service: KnowledgeService) -> int:
        judged = await feedback.judged_set(service, since)
        result = await feedback.evaluate(service, judged)
        if args.json:
            sys.stdout.buffer.write(
                orjson.dumps(result.as_json(), option=orjson.OPT_INDENT_2) + b"\n"
            )
        else:
            print(result.table())
        return 0

    return with_service(settings, report)


def run_migrate_store(settings: Settings, args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from knowledge_api.stores.migrate import migrate

    target_settings = settings
    if args.to_path is not None:
        if args.target not in PATH_SETTINGS:
            raise InvalidRequest("--to-path", "names a file or folder: sqlite, chroma or qdrant")
        place = PATH_SETTINGS[args.target]
        own = getattr(settings, place)
        target_settings = settings.replace(**{place: type(own)(args.to_path)})
        if args.source == args.target and Path(own).resolve() == args.to_path.resolve():
            raise InvalidRequest("--to-path", "must name another place than the store's own")
    elif args.source == args.target:
        raise InvalidRequest(
            "--to", "must name another store than --from (or give --to-path for a backup)"
        )
    collections = [validation.collection_name(name, "--collection") for name in args.collection]
    identity = compose.embedder_identity(compose.build_embedder(settings))

    async def run() -> int:
        async with contextlib.AsyncExitStack() as stack:
            source = compose.build_store(settings, identity, args.source)
            target = compose.build_store(target_settings, identity, args.target)
            for store in (source, target):
                await store.open()
                stack.push_async_callback(store.close)
            with tqdm(unit="doc", file=sys.stderr, disable=None) as bar:
                copied = await migrate(source, target, identity, collections, bar.update)
            trail = target.audit_log(settings.db_path)  # the target's trail: it was written
            await trail.open()
            stack.push_async_callback(trail.close)
            for name, summary in copied.items():
                if summary.documents:
                    action = f"cli migrate-store --from {args.source}"
                    counts = changes(None, summary)
                    await trail.append(AuditEntry(local_user().name, action, name, counts))
        for name, summary in copied.items():
            print(
                f"{name}: {summary.documents} documents copied ({summary.chunks} chunks), "
                f"{summary.skipped} unchanged skipped"
            )
        return 0

    return asyncio.run(run())


PATH_SETTINGS = {"sqlite": "db_path", "chroma": "chroma_path", "qdrant": "qdrant_path"}
"""The setting naming each file-backed store's place, for `migrate-store --to-path`."""


def run_migrate(settings: Settings, args: argparse.Namespace) -> int:
    """The schema of the postgres and supabase stores: vector columns sized for the
    configured embedder, SQL functions, indexes. Applied migrations are skipped."""
    if args.adopt or args.undo or args.wiki_vectors:
        return run_adoption(settings, args)
    if args.dry_run:
        raise InvalidRequest("--dry-run", "goes with --adopt, --wiki-vectors or --undo")
    identity = compose.embedder_identity(compose.build_embedder(settings))
    store = stores.create("postgres", settings, identity)
    database, applied = asyncio.run(store.migrate_schema())  # type: ignore[attr-defined]
    if applied:
        print(f"{database}: applied {', '.join(applied)}")
    else:
        print(f"{database}: the schema is up to date")
    return 0


def run_adoption(settings: Settings, args: argparse.Namespace) -> int:
    """`migrate --adopt | --wiki-vectors | --undo` on a database other pipelines fill:
    the plan first, then (without --dry-run) the steps, each printed as it starts."""
    from knowledge_api.stores.existing import adopt

    if args.undo and (args.adopt or args.wiki_vectors):
        raise InvalidRequest("--undo", "cannot be combined with --adopt or --wiki-vectors")
    if not settings.database_url:
        raise InvalidRequest(
            "KNOWLEDGE_DATABASE_URL", "must name the existing database (a direct connection)"
        )
    embedder = compose.build_embedder(settings)
    store = stores.create("postgres", settings, compose.embedder_identity(embedder))

    def report(step: str) -> None:
        print(f"applying {step}" if not args.undo else f"undoing {step}", flush=True)

    async def run() -> int:
        async with store.administered() as conn:  # type: ignore[attr-defined]
            if args.undo:
                steps = [adopt.Step(name, sql, "") for name, sql in await adopt.undo_plan(conn)]
                print_plan("undo", steps)
                if not args.dry_run:
                    await adopt.undo(conn, report)
                return 0
            if args.adopt:
                steps = await adopt.adoption_plan(conn)
                print_plan("adopt", steps)
                if not args.dry_run:
                    await adopt.apply(conn, steps, report)
            if args.wiki_vectors:
                await wiki_vectors(conn)
        return 0

    async def wiki_vectors(conn: Any) -> None:
        pages = await adopt.remaining_wiki_pages(conn)
        print(
            f"wiki vectors: {pages} pages to convert in batches of {args.batch_size} "
            f"(TEXT embeddings parsed; empty or malformed ones embedded by {embedder.name})"
        )
        if args.dry_run:
            return
        await asyncio.to_thread(embedder.load)
        done = await adopt.convert_wiki_vectors(
            conn,
            embedder.embed_documents,
            embedder.dimension,
            args.batch_size,
            report,
            lambda total: print(f"  {total.converted + total.embedded} pages", flush=True),
        )
        print(f"wiki vectors: {done.converted} converted, {done.embedded} embedded anew")

    return asyncio.run(run())


def print_plan(action: str, steps: list[Any]) -> None:
    if not steps:
        print(f"{action}: nothing to do")
    for step in steps:
        print(f"-- {action}: {step.name}\n{step.sql.strip()};")


def run_keys_create(settings: Settings, args: argparse.Namespace) -> int:
    from knowledge_api.usecases import keys

    async def create(service: KnowledgeService) -> int:
        key, token = await keys.create(
            service, args.name, split(args.scopes), split(args.collections)
        )
        reach = ", ".join(key.collections) if key.collections else "every collection"
        print(f"created key {key.name!r}: scopes {', '.join(key.scopes)}; {reach}")
        print("the token below is shown once; only its hash is kept:")
        print(token)
        return 0

    return with_storage(settings, create)


def run_audit(settings: Settings, args: argparse.Namespace) -> int:
    """The trail as GET /v1/knowledge/audit pages it: an entry per line, then the
    cursor of the next page (`next_cursor: ...`) when the page was full."""
    from knowledge_api.routes import audit

    asked = {
        name: getattr(args, name)
        for name in ("limit", "cursor", "key", "collection", "since", "until")
        if getattr(args, name) is not None
    }
    query = audit.query_of(asked)

    async def show(service: KnowledgeService) -> int:
        entries = await service.audit_page(query)
        for entry in entries:
            print(orjson.dumps(entry.view()).decode())
        if entries and len(entries) == query.limit:
            print(f"next_cursor: {audit.cursor_of(entries[-1].id)}")
        return 0

    return with_storage(settings, show)


def run_keys_list(settings: Settings, args: argparse.Namespace) -> int:
    from knowledge_api.usecases import keys

    async def show(service: KnowledgeService) -> int:
        for key in await keys.listed(service):
            reach = ",".join(key.collections) if key.collections else "*"
            print(
                f"{key.name}\tscopes={','.join(key.scopes)}\tcollections={reach}\t{key.created_at}"
            )
        return 0

    return with_storage(settings, show)


def run_keys_revoke(settings: Settings, args: argparse.Namespace) -> int:
    from knowledge_api.usecases import keys

    async def revoke(service: KnowledgeService) -> int:
        if not await keys.revoke(service, args.name):
            print(f"error: no key named {args.name!r}", file=sys.stderr)
            return 1
        print(f"revoked key {args.name!r}")
        return 0

    return with_storage(settings, revoke)


def split(values: str) -> list[str]:
    return [value.strip() for value in values.split(",") if value.strip()]


def with_storage(settings: Settings, work: Callable[[KnowledgeService], Awaitable[int]]) -> int:
    """Run `work` with the store and keys open and the model not loaded."""
    return with_service(settings, work, model=False)


def run_mcp(settings: Settings, args: argparse.Namespace) -> int:
    """The MCP tools over stdio: stdout carries the protocol, the log goes to stderr."""
    from knowledge_api.routes import mcp

    async def serve(service: KnowledgeService) -> int:
        await mcp.build(service, settings).run_stdio_async()
        return 0

    return with_service(settings, serve)


def with_service(
    settings: Settings, work: Callable[[KnowledgeService], Awaitable[int]], model: bool = True
) -> int:
    async def run() -> int:
        service = compose.build_service(settings)
        await (service.start() if model else service.open_storage())
        try:
            return await work(service)
        finally:
            await service.stop()

    # traced (an ingest: a trace per batch) when OTEL_EXPORTER_OTLP_ENDPOINT says so
    traces = tracing.configure(settings) if tracing.traces_endpoint(settings) else None
    try:
        return asyncio.run(run())
    finally:
        if traces is not None:
            tracing.disable()  # what is queued is sent first, for a few seconds at most


def parse_meta(pairs: list[str]) -> dict[str, str]:
    meta = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InvalidRequest("--meta", f"takes KEY=VALUE, got {pair!r}")
        meta[key] = value
    return meta
