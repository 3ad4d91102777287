"""The SQLite side tables (keys, audit, answers and ratings, upload jobs) share one
connection whose statements run on threads: closing it waits for the one running. Run
in a child process, since closing under a running statement crashes the process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCENARIO = """
import asyncio, sys
from pathlib import Path
from knowledge_api.stores.tables.audit import SQLiteAudit

COUNTING = '''WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c
WHERE x < 2000000) SELECT count(*) FROM c'''

async def main():
    tables = SQLiteAudit(Path(sys.argv[1]))
    await tables.open()
    running = asyncio.create_task(tables._run(COUNTING))
    while not tables._using.locked():  # under way on its thread, as a write sent off at
        await asyncio.sleep(0.001)  # shutdown (a thread not started yet would run after)
    await tables.close()
    print(await running, tables._conn)

asyncio.run(main())
"""


def test_closing_waits_for_a_statement_running_on_its_thread(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCENARIO, str(tmp_path / "tables.db")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["[(2000000,)]", "None"]
