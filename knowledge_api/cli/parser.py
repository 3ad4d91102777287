"""The command line: `knowledge-api COMMAND`, each command declared by a function below."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TypeAlias

from knowledge_api import __version__
from knowledge_api.cli import audit, evaluate, ingest, keys, query, serve, sources, stores
from knowledge_api.connectors.registry import connectors
from knowledge_api.models import DEFAULT_COLLECTION, SOURCE_TYPES
from knowledge_api.rerankers import rerankers
from knowledge_api.stores import stores as backends

Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
"""The root's subcommands: each function below adds one, its arguments and its `run`."""


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="knowledge-api")
    root.add_argument("--version", action="version", version=f"knowledge-api {__version__}")
    commands = root.add_subparsers(required=True, metavar="COMMAND")
    for declare in (
        serve_command,
        ingest_command,
        git_command,
        export_command,
        import_command,
        sources_command,
        query_command,
        mcp_command,
        sync_command,
        eval_command,
        migrate_store_command,
        backfill_offsets_command,
        keys_command,
        groups_command,
        acl_command,
        audit_command,
        migrate_command,
    ):
        declare(commands)
    # from the commands declared, so that the line names every one of them
    root.description = "knowledge-api " + " | ".join(commands.choices)
    return root


def serve_command(commands: Commands) -> None:
    command = commands.add_parser("serve", help="run the HTTP service")
    command.add_argument("--host", help="override KNOWLEDGE_API_HOST")
    command.add_argument("--port", type=int, help="override KNOWLEDGE_API_PORT")
    command.set_defaults(run=serve.run_serve)


def ingest_command(commands: Commands) -> None:
    command = commands.add_parser(
        "ingest",
        help="index Markdown, text, HTML, PDF, DOCX, PPTX, JSONL, e-mail, metrics, "
        "spreadsheet and image files, or a web page (http:// or https://)",
    )
    command.add_argument("paths", nargs="+", metavar="PATH", help="a file, a folder or a URL")
    command.add_argument(
        "--source-type",
        choices=SOURCE_TYPES,
        help="default: wiki for documents and tables, knowledge for JSONL, email for mail, "
        "metrics for KPI, rule and dashboard files",
    )
    command.add_argument(
        "--meta",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="metadata added to every document (repeatable)",
    )
    command.add_argument("--base-url", default="", help="URL prefix of the files' paths")
    command.add_argument(
        "--collection", default=DEFAULT_COLLECTION, help="collection to index into"
    )
    source_options(command)
    command.set_defaults(run=ingest.run_ingest)


def git_command(commands: Commands) -> None:
    command = commands.add_parser("ingest-git", help="index the commits of a git repository")
    command.add_argument("repo", type=Path, metavar="REPO", help="a git working tree or bare clone")
    command.add_argument("--since", help="only commits after this ISO date (e.g. 2026-01-31)")
    command.add_argument("--branch", help="branch or ref to read (default: the one checked out)")
    command.add_argument(
        "--base-url",
        default="",
        metavar="PATTERN",
        help="commit URL pattern, e.g. https://git.example.com/repo/commit/{hash}",
    )
    command.add_argument(
        "--collection", default=DEFAULT_COLLECTION, help="collection to index into"
    )
    source_options(command)
    command.set_defaults(run=ingest.run_ingest_git)


MASS_DELETE_HELP = "delete even more than KNOWLEDGE_PRUNE_MAX_FRACTION of the source"
ACL_HELP = (
    "who may read the documents: comma-separated principals (public, user:ID, group:NAME; "
    "'' closes them to admin keys); remembered as the source's own (default: the source's "
    "own, else public)"
)


def source_options(command: argparse.ArgumentParser) -> None:
    command.add_argument("--name", help="the source's name (default: the absolute path)")
    command.add_argument("--acl", metavar="P1,P2", help=ACL_HELP)
    command.add_argument(
        "--prune", action="store_true", help="mirror: delete the documents of files now gone"
    )
    command.add_argument(
        "--dry-run", action="store_true", help="print what would be added, updated, deleted"
    )
    command.add_argument("--allow-mass-delete", action="store_true", help=MASS_DELETE_HELP)


def export_command(commands: Commands) -> None:
    command = commands.add_parser(
        "export", help="write a collection (documents, chunks, vectors) to a JSON lines file"
    )
    command.add_argument("--collection", default=DEFAULT_COLLECTION)
    command.add_argument(
        "--output", required=True, type=Path, metavar="FILE", help="compressed if .gz or .zst"
    )
    command.set_defaults(run=stores.run_export)


def import_command(commands: Commands) -> None:
    command = commands.add_parser("import", help="read a file `export` wrote into the store")
    command.add_argument("file", type=Path, metavar="FILE")
    command.add_argument("--collection", help="import into this collection (default: the file's)")
    command.set_defaults(run=stores.run_import)


def sources_command(commands: Commands) -> None:
    command = commands.add_parser(
        "sources", help="the sources: documents and last run of each; add, sync, remove"
    )
    command.add_argument("--collection", help="only this collection's")
    command.add_argument("--json", action="store_true", help="the API's listing as JSON")
    command.set_defaults(run=sources.run_sources)
    actions = command.add_subparsers(metavar="ACTION")
    add = actions.add_parser("add", help="register a connector source (no sync)")
    add.add_argument("name", metavar="NAME")
    add.add_argument("--kind", required=True, choices=connectors.names())
    add.add_argument("--url", required=True, help="where the service answers")
    add.add_argument("--collection", default=DEFAULT_COLLECTION, help="collection to index into")
    add.add_argument(
        "--acl",
        metavar="P1,P2",
        help="who may read its documents (public, user:ID, group:NAME); without it the "
        "source is closed (admin keys only) until `knowledge-api acl set`",
    )
    add.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="a setting (repeatable)"
    )
    add.add_argument(
        "--secret",
        action="append",
        default=[],
        metavar="KEY=ENV_VAR",
        help="a secret, read from this environment variable at each sync (never stored)",
    )
    add.set_defaults(run=sources.run_add)
    sync = actions.add_parser("sync", help="sync a connector source, or --all")
    sync.add_argument("name", metavar="NAME", nargs="?")
    sync.add_argument("--all", action="store_true", help="every connector source")
    sync.add_argument("--collection", help="the collection of the source")
    sync.add_argument("--full", action="store_true", help="read everything, not since the cursor")
    sync.add_argument("--dry-run", action="store_true", help="print what would change")
    sync.add_argument("--allow-mass-delete", action="store_true", help=MASS_DELETE_HELP)
    sync.set_defaults(run=sources.run_sync)
    remove = actions.add_parser("remove", help="delete a connector source and its documents")
    remove.add_argument("name", metavar="NAME")
    remove.add_argument("--collection", help="the collection of the source")
    remove.set_defaults(run=sources.run_remove)


def query_command(commands: Commands) -> None:
    command = commands.add_parser("query", help="ask a question: the answer and its sources")
    command.add_argument("text")
    command.add_argument("--limit", type=int, default=5)
    command.add_argument("--sources", default="", help="comma-separated source types")
    command.add_argument("--collection", default=DEFAULT_COLLECTION)
    command.add_argument("--threshold", type=float, help="lowest similarity of a source (0-1)")
    command.add_argument("--no-synthesize", action="store_true", help="the sources only")
    command.add_argument("--json", action="store_true", help="the API's JSON response")
    command.add_argument(
        "--url", default="", help="ask a running service (no model is loaded here)"
    )
    command.add_argument("--api-key", default="", help="the service's API key, with --url")
    command.set_defaults(run=query.run_query)


def mcp_command(commands: Commands) -> None:
    command = commands.add_parser(
        "mcp", help="serve the knowledge base to an MCP client over stdin/stdout"
    )
    command.set_defaults(run=query.run_mcp)


def sync_command(commands: Commands) -> None:
    command = commands.add_parser("sync", help="pull the host's KB articles into the support index")
    command.add_argument(
        "--from", dest="source", required=True, metavar="URL", help="host base URL"
    )
    command.add_argument(
        "--full", action="store_true", help="fetch everything, remove what is gone"
    )
    command.add_argument("--allow-mass-delete", action="store_true", help=MASS_DELETE_HELP)
    command.add_argument("--acl", metavar="P1,P2", help=ACL_HELP)
    command.set_defaults(run=ingest.run_sync)


def eval_command(commands: Commands) -> None:
    command = commands.add_parser(
        "eval", help="retrieval quality, or answer calibration, on a BEIR directory"
    )
    command.add_argument("directory", type=Path, metavar="DIR", nargs="?")
    command.add_argument(
        "--feedback",
        action="store_true",
        help="no DIR: judge by readers' ratings (POST /v1/knowledge/feedback) and score "
        "today's ranking on the rated queries",
    )
    command.add_argument("--since", help="with --feedback: ratings at or after this date")
    command.add_argument("--json", action="store_true", help="print the report as JSON")
    command.add_argument(
        "--answers",
        action="store_true",
        help="answer every judged query, and again from each passage it retrieved alone, and "
        "report how well confidence predicts a relevant first citation (expected calibration "
        "error, precision per level)",
    )
    command.add_argument(
        "--plot",
        type=Path,
        metavar="FILE.png",
        help="with --answers: write a reliability diagram (needs the plot extra)",
    )
    command.add_argument(
        "--collection", default="", help="keep the corpus in this collection (default: temporary)"
    )
    command.add_argument(
        "--reranker",
        choices=[name for name in rerankers.names() if name != "none"],
        help="add a row: hybrid reranked by this reranker (its KNOWLEDGE_RERANK_* settings "
        "apply); without it KNOWLEDGE_RERANKER is not used",
    )
    command.set_defaults(run=evaluate.run_eval)


def backfill_offsets_command(commands: Commands) -> None:
    command = commands.add_parser(
        "backfill-offsets",
        help="give chunks stored before offsets were recorded their place in their document",
    )
    command.add_argument(
        "--collection", action="append", default=[], help="only this one (repeatable)"
    )
    command.set_defaults(run=stores.run_backfill_offsets)


def migrate_store_command(commands: Commands) -> None:
    command = commands.add_parser(
        "migrate-store", help="copy collections to another store backend, vectors included"
    )
    command.add_argument("--from", dest="source", required=True, choices=backends.names())
    command.add_argument("--to", dest="target", required=True, choices=backends.names())
    command.add_argument(
        "--collection", action="append", default=[], help="copy only this one (repeatable)"
    )
    command.add_argument(
        "--to-path",
        type=Path,
        metavar="PATH",
        help="the target's file or folder (sqlite, chroma, qdrant): a backup into a store of "
        "the same backend",
    )
    command.set_defaults(run=stores.run_migrate_store)


def actions_of(commands: Commands, name: str, help: str) -> Commands:
    """A command that is only the actions below it (`keys create`, `acl set`): one of
    them must be named."""
    command = commands.add_parser(name, help=help)
    return command.add_subparsers(required=True, metavar="ACTION")


def keys_command(commands: Commands) -> None:
    actions = actions_of(commands, "keys", "create, list and revoke API keys")
    create = actions.add_parser("create", help="a new key; its token is printed once, last")
    create.add_argument("--name", required=True)
    create.add_argument(
        "--scopes", required=True, help="comma-separated: read, write, admin, delegate"
    )
    create.add_argument(
        "--collections", default="", help="comma-separated collections (default: all)"
    )
    create.add_argument("--user", default="", help="the user id the key reads as")
    create.add_argument(
        "--groups", default="", help="comma-separated groups the key's own principals hold"
    )
    create.set_defaults(run=keys.run_keys_create)
    listing = actions.add_parser("list", help="every key: name, scopes, collections, created")
    listing.set_defaults(run=keys.run_keys_list)
    revoke = actions.add_parser("revoke", help="revoke a key by name")
    revoke.add_argument("name")
    revoke.set_defaults(run=keys.run_keys_revoke)


def groups_command(commands: Commands) -> None:
    actions = actions_of(commands, "groups", "the groups the service knows for a user id")
    setting = actions.add_parser("set", help="replace a user's groups ('' forgets them)")
    setting.add_argument("id", metavar="ID", help="the user id (an e-mail address, any id)")
    setting.add_argument("groups", metavar="GROUP,GROUP", help="comma-separated group names")
    setting.set_defaults(run=keys.run_groups_set)
    getting = actions.add_parser("get", help="a user's groups")
    getting.add_argument("id", metavar="ID")
    getting.set_defaults(run=keys.run_groups_get)


def acl_command(commands: Commands) -> None:
    actions = actions_of(commands, "acl", "who may read a document or a source's documents")
    setting = actions.add_parser("set", help="set an access list; nothing is embedded again")
    setting.add_argument("--collection", default=DEFAULT_COLLECTION)
    which = setting.add_mutually_exclusive_group(required=True)
    which.add_argument("--document", metavar="ID", help="a document's id")
    which.add_argument("--source", metavar="NAME", help="a source's name: all its documents")
    setting.add_argument("acl", metavar="P1,P2", help=ACL_HELP)
    setting.set_defaults(run=keys.run_acl_set)


def audit_command(commands: Commands) -> None:
    command = commands.add_parser(
        "audit", help="the audit trail of writes, newest first, one JSON object a line"
    )
    command.add_argument("--limit", default="50", help="entries (1-200, default 50)")
    command.add_argument("--cursor", help="next_cursor printed after a full page")
    command.add_argument("--key", help="only this key's writes (or cli:<user>, kb-sync)")
    command.add_argument("--collection", help="only writes to this collection")
    command.add_argument("--since", help="at or after this ISO 8601 date or time (UTC)")
    command.add_argument("--until", help="before this ISO 8601 date or time (UTC)")
    command.set_defaults(run=audit.run_audit)


def migrate_command(commands: Commands) -> None:
    command = commands.add_parser(
        "migrate", help="apply the Postgres schema migrations to KNOWLEDGE_DATABASE_URL"
    )
    command.add_argument(
        "--adopt",
        action="store_true",
        help="add to an existing siam_vectors/wiki_documents database only what the service "
        "needs (indexes, knowledge_* functions), recorded for --undo",
    )
    command.add_argument(
        "--wiki-vectors",
        action="store_true",
        help="give wiki_documents a vector column filled from its TEXT embeddings (resumable)",
    )
    command.add_argument("--undo", action="store_true", help="take back what --adopt added")
    command.add_argument("--dry-run", action="store_true", help="print the plan's SQL only")
    command.add_argument(
        "--batch-size", type=int, default=200, help="wiki pages per transaction (200)"
    )
    command.set_defaults(run=stores.run_migrate)
