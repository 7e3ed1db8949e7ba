"""The benchmarks import dlopt's modules where they are.

The benchmarks run in their own environments (the suite's needs torchvision), so no test
of the main run executes them, and a module moved inside dlopt broke the suite's first
call unnoticed. Every ``from dlopt... import name`` and ``import dlopt...`` in
``benchmarks/`` is resolved here without running the benchmark.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
#: The distributions the main test environment installs (the suite's peer is not one).
FIRST_PARTY = ("dlopt", "dlopt_fx", "dlopt_onnxruntime", "dlopt_torchao")


def _first_party(module: str | None) -> bool:
    return module is not None and module.split(".")[0] in FIRST_PARTY


def _fallbacks(tree: ast.AST) -> set[int]:
    """Ids of the import statements in ``except ImportError`` branches: a benchmark that
    also runs against older revisions falls back to where a name used to live."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ExceptHandler) and "ImportError" in ast.unparse(node.type or node):
            inside.update(id(child) for child in ast.walk(node))
    return inside


def _imports(path: Path) -> list[tuple[str, str | None, int]]:
    """``(module, name or None, line)`` for each first-party import in ``path``."""
    found: list[tuple[str, str | None, int]] = []
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    fallbacks = _fallbacks(tree)
    for node in ast.walk(tree):
        if id(node) in fallbacks:
            continue
        if isinstance(node, ast.ImportFrom) and node.level == 0 and _first_party(node.module):
            assert node.module is not None
            found.extend((node.module, alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.Import):
            found.extend(
                (alias.name, None, node.lineno) for alias in node.names if _first_party(alias.name)
            )
    return found


SCRIPTS = sorted(BENCHMARKS.rglob("*.py"))


def test_the_benchmarks_are_found() -> None:
    assert any(p.parent.name == "suite" for p in SCRIPTS), "benchmarks/suite/ not found"
    assert sum(len(_imports(p)) for p in SCRIPTS) > 10


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(BENCHMARKS)))
def test_every_dlopt_import_resolves(script: Path) -> None:
    missing = []
    for module, name, line in _imports(script):
        try:
            imported = importlib.import_module(module)
        except ImportError as exc:
            missing.append(f"line {line}: import {module}: {exc}")
            continue
        if name is None or name == "*" or hasattr(imported, name):
            continue
        try:
            importlib.import_module(f"{module}.{name}")
        except ImportError:
            missing.append(f"line {line}: {module} has no {name!r}")
    assert not missing, f"{script.relative_to(BENCHMARKS.parent)}: " + "; ".join(
        dict.fromkeys(missing)
    )
