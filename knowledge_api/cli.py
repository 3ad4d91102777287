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

from knowledge_api import __version__, compose, validation
from knowledge_api.errors import ConfigurationError, InvalidRequest, KnowledgeAPIError
from knowledge_api.ingest.git_source import GitOptions, load_git
from knowledge_api.ingest.loaders import LoadOptions, Skipped, load_paths
from knowledge_api.ingest.pipeline import changed_documents
from knowledge_api.ingest.progress import progress
from knowledge_api.models import DEFAULT_COLLECTION, SOURCE_TYPES, Document, IndexSummary
from knowledge_api.registry import import_extra
from knowledge_api.rerankers import rerankers
from knowledge_api.routes.observe import configure_logging
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
    history.set_defaults(run=run_ingest_git)

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
    sync.set_defaults(run=run_sync)

    evaluate = commands.add_parser(
        "eval", help="retrieval quality, or answer calibration, on a BEIR directory"
    )
    evaluate.add_argument("directory", type=Path, metavar="DIR")
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
        http="httptools",
        ws="none",  # no route speaks WebSocket; loading a library for it cost ~50 ms a start
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
    """Files are read and parsed before the service (and its model) starts, so a wrong
    path costs nothing. Exit 1 when some files were skipped, after indexing the rest."""
    options = LoadOptions(
        source_type=args.source_type,
        collection=validation.collection_name(args.collection, "--collection"),
        metadata=parse_meta(args.meta),
        base_url=args.base_url,
    )
    loaded = load_paths(args.paths, options)
    for skipped in loaded.skipped:
        detail = f" ({skipped.detail})" if skipped.detail else ""
        print(f"skipped {skipped.path}: {skipped.reason}{detail}", file=sys.stderr)
    status = index_documents(settings, loaded.documents)
    if loaded.skipped:
        print(skipped_summary(loaded.skipped))
        return 1
    return status


def run_ingest_git(settings: Settings, args: argparse.Namespace) -> int:
    """The commits are listed before the service starts: a bad repository, branch or
    option is an error without loading the model."""
    options = GitOptions(
        since=args.since,
        branch=args.branch,
        base_url=args.base_url,
        collection=validation.collection_name(args.collection, "--collection"),
    )
    return index_documents(settings, load_git(args.repo, options))


def index_documents(settings: Settings, documents: list[Document]) -> int:
    """Index through the service and print the summary line on stdout. Documents stored
    unchanged are set aside first, so a run with nothing new never loads the model."""
    started = time.perf_counter()
    changed = asyncio.run(changed_in_store(settings, documents)) if documents else []
    unchanged = len(documents) - len(changed)
    if not changed:
        print(ingest_summary(IndexSummary(), unchanged, started))
        return 0

    async def ingest(service: KnowledgeService) -> int:
        indexing = time.perf_counter()  # the model loaded: chunks/s is the indexing rate
        with progress(total=len(changed), unit="document", desc="indexing") as update:
            summary = await service.ingest(changed, progress=update)
        print(ingest_summary(summary, unchanged, indexing))
        return 0

    return with_service(settings, ingest)


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
    return with_service(settings, lambda service: kb_sync.sync_command(service, full=args.full))


def run_eval(settings: Settings, args: argparse.Namespace) -> int:
    from knowledge_api.usecases import answer_eval, evaluation

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


def run_migrate_store(settings: Settings, args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from knowledge_api.stores.migrate import migrate

    if args.source == args.target:
        raise InvalidRequest("--to", "must name another store than --from")
    collections = [validation.collection_name(name, "--collection") for name in args.collection]
    identity = compose.embedder_identity(compose.build_embedder(settings))

    async def run() -> int:
        async with contextlib.AsyncExitStack() as stack:
            source = compose.build_store(settings, identity, args.source)
            target = compose.build_store(settings, identity, args.target)
            for store in (source, target):
                await store.open()
                stack.push_async_callback(store.close)
            with tqdm(unit="doc", file=sys.stderr, disable=None) as bar:
                copied = await migrate(source, target, identity, collections, bar.update)
        for name, summary in copied.items():
            print(
                f"{name}: {summary.documents} documents copied ({summary.chunks} chunks), "
                f"{summary.skipped} unchanged skipped"
            )
        return 0

    return asyncio.run(run())


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
    from knowledge_api.stores import adopt

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

    return asyncio.run(run())


async def changed_in_store(settings: Settings, documents: list[Document]) -> list[Document]:
    """The documents the configured store does not hold as they are, asked of the store
    alone (no model is loaded for that)."""
    identity = compose.embedder_identity(compose.build_embedder(settings))
    store = compose.build_store(settings, identity)
    await store.open()
    try:
        return await changed_documents(store, documents)
    finally:
        await store.close()


def parse_meta(pairs: list[str]) -> dict[str, str]:
    meta = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InvalidRequest("--meta", f"takes KEY=VALUE, got {pair!r}")
        meta[key] = value
    return meta
