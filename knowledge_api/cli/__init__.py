"""The `knowledge-api` command: its tree in `parser`, each command in the module of its
concept (`serve`, `ingest`, `stores`, `keys`, `query`, `evaluate`, `audit`)."""

from __future__ import annotations

import sys

from knowledge_api.errors import ConfigurationError, InvalidRequest, KnowledgeAPIError
from knowledge_api.heap import limit_arenas


def main(argv: list[str] | None = None) -> int:
    limit_arenas()
    # Imported here: a child process the service spawns (to build the local model, to
    # measure bf16) imports the module of the `knowledge-api` script, this one, and
    # needs none of the command line's (uvicorn, the stores, the connectors): they
    # took its peak from 242 to 262 MB, while the service waited on it.
    from knowledge_api.cli.parser import parser
    from knowledge_api.cli.serve import run_serve
    from knowledge_api.logs import configure_logging
    from knowledge_api.settings import Settings

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
