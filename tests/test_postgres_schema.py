"""The Postgres migrations and the current definitions of their SQL functions: each
function's text in one file of functions/, included by the last migration that
(re)defines it; the migrations as the runner reads them."""

from __future__ import annotations

import re
from importlib import resources

from knowledge_api.stores.postgres.schema import INCLUDE, migrations

FOLDER = resources.files("knowledge_api.stores.sql").joinpath("postgres")
CREATE = re.compile(r"^CREATE (?:OR REPLACE )?FUNCTION\s+(\w+)\s*\(", re.MULTILINE)


def raw_migrations() -> dict[str, str]:
    return {
        script.name: script.read_text()
        for script in sorted(FOLDER.iterdir(), key=lambda s: s.name)
        if script.name.endswith(".sql")
    }


def function_files() -> dict[str, str]:
    folder = FOLDER.joinpath("functions")
    return {
        script.name.removesuffix(".sql"): script.read_text()
        for script in folder.iterdir()
        if script.name.endswith(".sql")
    }


def test_each_function_file_holds_that_function_alone() -> None:
    for name, text in function_files().items():
        assert CREATE.findall(text) == [name], name
        assert text.startswith(f"CREATE OR REPLACE FUNCTION {name}("), name


def test_each_function_file_is_included_once_by_the_last_migration_defining_it() -> None:
    included: dict[str, str] = {}
    for script, text in raw_migrations().items():
        for path in INCLUDE.findall(text):
            name = path.removeprefix("functions/").removesuffix(".sql")
            assert name not in included, f"{name} included by {included.get(name)} and {script}"
            included[name] = script
    assert set(included) == set(function_files())
    for script, text in raw_migrations().items():
        for name in CREATE.findall(text):  # a definition written out is an earlier one
            assert name in included, f"{script} defines {name}: its text belongs in functions/"
            assert script < included[name], f"{script} redefines {name} after its current text"


def test_the_runner_reads_each_migration_with_its_functions_included() -> None:
    read = {f"{name}.sql": sql for _, name, sql in migrations()}
    assert list(read) == list(raw_migrations())
    files = function_files()
    for script, text in raw_migrations().items():
        assert not INCLUDE.search(read[script])
        for path in INCLUDE.findall(text):
            assert (
                files[path.removeprefix("functions/").removesuffix(".sql")] in read[script] + "\n"
            )
