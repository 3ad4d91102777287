"""The BEIR layout's JSON-lines files (a corpus, its queries): one object a line, each
with an "_id" and a "text"."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from knowledge_api import validation
from knowledge_api.errors import InvalidRequest


def jsonl_records(path: Path, kind: str) -> Iterator[dict[str, Any]]:
    """The BEIR objects of a JSON-lines file, each with its "_id" and "text" as strings;
    a line that is not one fails with its file and line number."""
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                validation.check_int64(record.get("metadata"), f"{path}:{number} metadata")
                yield {**record, "_id": str(record["_id"]), "text": str(record["text"])}
            except InvalidRequest:
                raise
            except (ValueError, KeyError, TypeError, AttributeError) as e:
                raise InvalidRequest(f"{path}:{number}", f"not a {kind} record ({e})") from e
