"""The house reads top-down: entry points -> the composition root -> use cases -> the
service -> the seams -> the core. No module imports from a layer above its own."""

from __future__ import annotations

import ast
from pathlib import Path

import knowledge_api

PACKAGE = Path(knowledge_api.__file__).parent
CORE = {
    "errors",
    "filters",
    "models",
    "observer",
    "redaction",
    "settings",
    "validation",
    "text",
    "timing",
    "registry",
    "__init__",
}
SEAMS = {
    "stores",
    "embeddings",
    "rerankers",
    "synthesis",
    "ingest",
    "cache",
    "shared_cache",
    "grounding",
    "ir_metrics",
    "routing",
    "prefetch",
    "calibration",
}
LAYERS = [
    ("core", CORE),
    ("seams", SEAMS),
    ("service", {"service"}),
    ("use cases", {"usecases"}),
    ("composition", {"compose"}),
    ("entry points", {"routes", "app", "cli", "support", "client", "__main__"}),
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
    assert layer_of("knowledge_api.service") > layer_of("knowledge_api.stores.sqlite")
    assert "knowledge_api.service" in imports(PACKAGE / "usecases" / "query.py")


def test_settings_import_nothing_from_the_seams() -> None:
    assert {t for t in imports(PACKAGE / "settings.py") if layer_of(t) > 0} == set()
