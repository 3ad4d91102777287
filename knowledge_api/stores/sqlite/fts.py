"""The full-text index over chunks as the sqlite store's migrations declare it: the FTS5
table and the triggers that keep it current (the first migration), and how eagerly its
segments are merged (012). The in-memory keyword index of the stores whose engine does
not rank by keywords (stores/keyword.py) is built from the same text, so both rank by
one definition and are searched alike."""

from __future__ import annotations

from functools import cache
from importlib import resources

MIGRATION = "001_initial.sql"
FIRST = "CREATE VIRTUAL TABLE chunks_fts"
LAST = "CREATE TRIGGER chunks_ad"
SEGMENTS = "012_fts_segments.sql"


@cache
def fts_schema() -> str:
    """The statements of the FTS5 table over `chunks`, its two triggers and its merge
    setting."""
    folder = resources.files("knowledge_api.stores.sql").joinpath("sqlite")
    script = folder.joinpath(MIGRATION).read_text()
    start = script.index(FIRST)
    end = script.index("END;", script.index(LAST)) + len("END;")
    return f"{script[start:end]}\n{folder.joinpath(SEGMENTS).read_text()}"
