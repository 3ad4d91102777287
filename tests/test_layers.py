"""The house reads top-down: entry points -> the HTTP plumbing they stand on -> the
composition root -> use cases -> the service -> the seams -> the core. No module imports
from a layer above its own: the plumbing knows no resource."""

from __future__ import annotations

import ast
import inspect
import re
from collections.abc import Callable
from pathlib import Path

import knowledge_api

PACKAGE = Path(knowledge_api.__file__).parent
CORE = {
    "beir",
    "calibration",
    "errors",
    "facets",
    "filters",
    "principals",
    "ranking",
    "models",
    "observer",
    "redaction",
    "settings",
    "config",
    "validation",
    "grounding",
    "ir_metrics",
    "text",
    "spans",
    "evidence",
    "timing",
    "registry",
    "sdk",
    "tracing",
    "logs",
    "ledger",
    "heap",
    "__init__",
}
SEAMS = {
    "stores",
    "embeddings",
    "rerankers",
    "synthesis",
    "ingest",
    "connectors",
    "cache",
    "routing",
    "prefetch",
}
LAYERS = [
    ("core", CORE),
    ("seams", SEAMS),
    ("service", {"service"}),
    ("use cases", {"usecases"}),
    ("composition", {"compose"}),
    ("http plumbing", {"web"}),
    ("views", {"views"}),
    ("entry points", {"routes", "mcp", "app", "cli", "support", "client", "__main__"}),
]


def layer_of(module: str) -> int:
    """The layer of `knowledge_api.<first part>...` (the package's own modules only)."""
    top = module.split(".")[1] if "." in module else "__init__"
    for level, (_, names) in enumerate(LAYERS):
        if top in names:
            return level
    raise AssertionError(f"{module} belongs to no layer: add it to LAYERS")


def imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "knowledge_api":  # a submodule, or a name of the package
                found.update(
                    f"knowledge_api.{a.name}" if is_module(a.name) else "knowledge_api"
                    for a in node.names
                )
            elif node.module.startswith("knowledge_api."):
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("knowledge_api."))
    return found


def is_module(name: str) -> bool:
    return (PACKAGE / f"{name}.py").exists() or (PACKAGE / name).is_dir()


def modules() -> dict[str, Path]:
    return {
        "knowledge_api." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts): path
        for path in PACKAGE.rglob("*.py")
    }


def test_no_module_imports_from_a_layer_above_its_own() -> None:
    upward = [
        f"{module} ({LAYERS[layer_of(module)][0]}) imports {target} ({LAYERS[layer_of(target)][0]})"
        for module, path in modules().items()
        for target in imports(path)
        if layer_of(target) > layer_of(module)
    ]
    assert upward == []


def test_the_check_sees_an_upward_import() -> None:
    """The rule bites: a seam importing the service would be reported."""
    assert layer_of("knowledge_api.service") > layer_of("knowledge_api.stores.sqlite.store")
    assert "knowledge_api.service" in imports(PACKAGE / "usecases" / "query.py")
    assert layer_of("knowledge_api.routes.query") > layer_of("knowledge_api.web.sse")
    assert layer_of("knowledge_api.views.query") > layer_of("knowledge_api.web.fields")


def test_settings_import_nothing_from_the_seams() -> None:
    declarations = [PACKAGE / "settings.py", *(PACKAGE / "config").glob("*.py")]
    assert {t for path in declarations for t in imports(path) if layer_of(t) > 0} == set()


REGISTERED = re.compile(r"^(knowledge_api(?:\.\w+)+):\w+$")
"""A registry's target ("module:Class"): the module is imported when its name is chosen."""


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(("knowledge_api", *parts[: -1 if parts[-1] == "__init__" else None]))


def arrows(path: Path, known: set[str]) -> set[str]:
    """Every module of the package that `path` imports, wherever the import stands (in
    a function, under TYPE_CHECKING), a submodule imported by name from its package,
    and every registry target it names: an import made by import_module is an arrow too."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] == "knowledge_api":
                for alias in node.names:
                    submodule = f"{node.module}.{alias.name}"
                    found.add(submodule if submodule in known else node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("knowledge_api."))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            target = REGISTERED.match(node.value)
            if target is not None and target.group(1) in known:
                found.add(target.group(1))
    return found


def import_graph() -> dict[str, set[str]]:
    paths = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    return {module: arrows(path, set(paths)) - {module} for module, path in paths.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in graph.get(module, ()):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group = []
            while not group or group[-1] != module:
                group.append(stack.pop())
            if len(group) > 1:
                found.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_no_import_cycle() -> None:
    assert cycles(import_graph()) == []


def found_in_module(
    source: str, finding: Callable[[Path, set[str]], set[str]], folder: Path
) -> set[str]:
    """What `finding` finds in a module of `source`, written in `folder`: how a test shows
    that a rule bites."""
    module = folder / "module.py"
    module.write_text(source)
    return finding(module, set(import_graph()))


def test_the_cycle_check_sees_a_cycle_and_the_hidden_arrows(tmp_path: Path) -> None:
    """The rule bites: modules importing each other in a ring are a cycle, and a
    registry's target, an import inside a function or under TYPE_CHECKING, and a
    submodule imported from its package each count as an arrow."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    source = """
from typing import TYPE_CHECKING
from knowledge_api.stores import records
if TYPE_CHECKING:
    from knowledge_api.service import KnowledgeService
def late():
    from knowledge_api.compose import build_service
REGISTERED = 'knowledge_api.cache.redis:RedisCaches'
"""
    assert found_in_module(source, arrows, tmp_path) == {
        "knowledge_api.stores.records",
        "knowledge_api.service",
        "knowledge_api.compose",
        "knowledge_api.cache.redis",
    }


def found_in(package: str, finding: Callable[[Path, set[str]], set[str]]) -> dict[str, list[str]]:
    """Each module of `package` in which `finding` finds an import, with what it found."""
    known = set(import_graph())
    return {
        module: sorted(found)
        for module, path in modules().items()
        if module.startswith(package + ".") and (found := finding(path, known))
    }


def borrowed_from_routes(path: Path, known: set[str]) -> set[str]:
    """The modules of routes/ that `path` imports, wherever the import stands."""
    routes = "knowledge_api.routes"
    return {t for t in arrows(path, known) if t == routes or t.startswith(routes + ".")}


def test_the_command_line_borrows_nothing_from_the_routes() -> None:
    """A command goes through the use cases and the service as a route does; what it
    shares with a route (a body's parsing, a reply's rendering) lives below both, in
    views/."""
    assert found_in("knowledge_api.cli", borrowed_from_routes) == {}


def test_the_route_check_sees_a_command_borrow_from_a_route(tmp_path: Path) -> None:
    """The rule bites: a route module imported inside a function, the routes package
    and a route imported by name from it are each reported; views are not."""
    source = """
from knowledge_api.routes import ROUTES
from knowledge_api.views.query import parse
def run():
    from knowledge_api.routes import query
"""
    assert found_in_module(source, borrowed_from_routes, tmp_path) == {
        "knowledge_api.routes",
        "knowledge_api.routes.query",
    }


def seams_reached(path: Path, known: set[str]) -> set[str]:
    """The seam modules `path` imports, wherever the import stands."""
    return {target for target in arrows(path, known) if layer_of(target) == SEAM_LAYER}


SEAM_LAYER = next(level for level, (name, _) in enumerate(LAYERS) if name == "seams")


def test_use_cases_talk_to_the_service_not_to_the_seams() -> None:
    """A use case reaches a store, an embedder, the synthesis chain or a loader only
    through the service, so a backend can change under it."""
    assert found_in("knowledge_api.usecases", seams_reached) == {}


def test_the_seam_check_sees_a_use_case_reach_a_seam(tmp_path: Path) -> None:
    """The rule bites: a store, a loader (even under TYPE_CHECKING) and a registry's
    target are seams; the service and the core are not."""
    source = """
from typing import TYPE_CHECKING
from knowledge_api.service import KnowledgeService
from knowledge_api.models import Document
from knowledge_api.stores.tables.audit import SQLiteAudit
if TYPE_CHECKING:
    from knowledge_api.ingest.loaders import LoadOptions
REGISTERED = 'knowledge_api.cache.redis:RedisCaches'
"""
    assert found_in_module(source, seams_reached, tmp_path) == {
        "knowledge_api.stores.tables.audit",
        "knowledge_api.ingest.loaders",
        "knowledge_api.cache.redis",
    }


HELD_SEAMS = {
    "store",
    "embedder",
    "synthesizer",
    "reranker",
    "keys",
    "audit_log",
    "feedback_log",
    "jobs",
    "caches",
    "tier1",
    "query_batcher",
    "prefetcher",
    "identity",
}
"""What the engine holds: a use case asks the service for a named step instead
(`service.settings` is no seam)."""


def service_names(tree: ast.AST) -> set[str]:
    """The names the service goes by in a module: `service`, a parameter annotated as
    the service, and every alias of one of those (`s = service`, `s = self.service`)."""
    names = {"service"}
    for node in ast.walk(tree):
        annotation = node.annotation if isinstance(node, ast.arg) else None
        if annotation is not None and "KnowledgeService" in ast.unparse(annotation):
            names.add(node.arg)
    grown = True
    while grown:
        grown = False
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and is_service(node.value, names):
                for target in node.targets:
                    if isinstance(target, ast.Name) and target.id not in names:
                        names.add(target.id)
                        grown = True
    return names


def is_service(node: ast.AST, names: set[str]) -> bool:
    if isinstance(node, ast.Name):
        return node.id in names
    return isinstance(node, ast.Attribute) and node.attr == "service"


def seams_read(path: Path) -> list[str]:
    """Each place `path` reads a seam the engine holds off the service: an attribute
    (`service.store`, `self.service.jobs`, through an alias) or getattr (with a seam's
    name, or a name it cannot tell)."""
    tree = ast.parse(path.read_text())
    names = service_names(tree)
    found: list[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in HELD_SEAMS:
            if is_service(node.value, names):
                found.append(node)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "getattr"
            and node.args
            and is_service(node.args[0], names)
        ):
            name = node.args[1] if len(node.args) > 1 else None
            if not isinstance(name, ast.Constant) or name.value in HELD_SEAMS:
                found.append(node)
    found.sort(key=lambda node: (node.lineno, node.col_offset))
    return [f"{path.name}:{node.lineno} {ast.unparse(node)}" for node in found]


def test_use_cases_ask_the_service_for_steps_not_for_its_seams() -> None:
    """A use case says what it does through a named step of the service; it never
    takes a seam the engine holds off the service to drive it itself."""
    read = [
        place
        for module, path in modules().items()
        if module.startswith("knowledge_api.usecases.")
        for place in seams_read(path)
    ]
    assert read == []


def test_the_seam_read_check_sees_aliases_and_getattr(tmp_path: Path) -> None:
    """The rule bites: an attribute of the service or of `self.service`, an alias of
    the service or of a seam, and getattr are each reported; settings and parts are not."""
    module = tmp_path / "usecase.py"
    module.write_text(
        "async def run(service, other: 'KnowledgeService', name):\n"
        "    store = service.store\n"
        "    held = service\n"
        "    held.embedder.load()\n"
        "    other.tier1.peek(1)\n"
        "    getattr(service, 'jobs')\n"
        "    getattr(service, name)\n"
        "    service.settings.limit\n"
        "    await service.sources.listed()\n"
        "class Runner:\n"
        "    async def go(self):\n"
        "        await self.service.keys.all()\n"
    )
    assert seams_read(module) == [
        "usecase.py:2 service.store",
        "usecase.py:4 held.embedder",
        "usecase.py:5 other.tier1",
        "usecase.py:6 getattr(service, 'jobs')",
        "usecase.py:7 getattr(service, name)",
        "usecase.py:12 self.service.keys",
    ]


def test_the_service_reads_in_one_sitting() -> None:
    """KnowledgeService, with every class of the package it inherits from, and each
    module of the service stay within 400 lines: its other concerns are parts it holds."""
    from knowledge_api.service import KnowledgeService

    inherited = [cls for cls in KnowledgeService.__mro__ if cls.__module__.startswith(PACKAGE.name)]
    assert sum(len(inspect.getsource(cls).splitlines()) for cls in inherited) <= 400
    longest = max((PACKAGE / "service").glob("*.py"), key=lambda p: len(p.read_text().splitlines()))
    assert len(longest.read_text().splitlines()) <= 400
