"""The modules of ``dlopt`` import each other in one direction: no circles, never upward.

The layers are declared once, here (:data:`LAYERS`, drawn in docs/architecture.md): a
module may import from its own layer and the layers below it, never from one above (the
validation gate importing the pipeline, say).

The graph is read from the sources with :mod:`ast`, nothing is imported. Every import
counts, at module level or inside a function (a function-level import that hides a
circle is still a circle), except those under ``if TYPE_CHECKING:``. Importing
``dlopt.a.b`` also runs the package ``dlopt.a`` (its ``__init__``), so that is an edge
too, except from a module inside that package; the root package ``dlopt`` counts only
where a module takes a name from it.
"""

from __future__ import annotations

import ast
import itertools
import re
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

import dlopt

Graph = dict[str, dict[str, int]]  # module -> {imported module: first line}

#: Edges that still close a circle, each waiting for its cut (remove the entry then;
#: ``test_pending_edges_still_exist`` fails once an edge is gone). Add nothing here.
PENDING_EDGES: dict[tuple[str, str], str] = {}


#: The layers of ``dlopt``, lowest first. A module belongs to the layer of the longest
#: prefix that names it, and may import only from its own layer or a lower one. A new
#: module lands in its package's layer; a new package needs its line here (and in
#: docs/architecture.md). A package ``__init__`` that imports nothing costs nothing to run
#: and is no dependency: edges into such an ``__init__`` are not checked.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "foundation",
        (
            "dlopt._version",
            "dlopt.errors",
            "dlopt.vocabulary",
            "dlopt.precision",
            "dlopt.events",
            "dlopt.platform",
        ),
    ),
    ("settings", ("dlopt.settings",)),
    ("the plugin contract", ("dlopt.contract", "dlopt.plugin", "dlopt.hookspecs")),
    ("gates", ("dlopt.validation", "dlopt.measurement", "dlopt.serving")),
    ("selection rules", ("dlopt.selection",)),
    ("plugin loading", ("dlopt.plugins",)),
    ("pipeline", ("dlopt.pipeline",)),
    ("evidence", ("dlopt.evidence",)),
    ("bundles", ("dlopt.bundle",)),
    ("cache", ("dlopt.cache",)),
    ("engine", ("dlopt.engine",)),
    ("isolation", ("dlopt.isolation",)),
    ("api", ("dlopt.api",)),
    ("reporting", ("dlopt.reporting",)),
    ("fleet", ("dlopt.fleet",)),
    ("surfaces", ("dlopt.cli", "dlopt.agents", "dlopt.testing", "dlopt.__main__", "dlopt")),
)


def layer_of(module: str, layers: Sequence[tuple[str, Sequence[str]]] = LAYERS) -> int | None:
    """The index of ``module``'s layer (longest declared prefix wins), or ``None``."""
    best: tuple[int, int] | None = None  # (prefix length, layer index)
    for index, (_, prefixes) in enumerate(layers):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (
                best is None or len(prefix) > best[0]
            ):
                best = (len(prefix), index)
    return None if best is None else best[1]


def upward_edges(
    graph: Graph, layers: Sequence[tuple[str, Sequence[str]]] = LAYERS
) -> list[tuple[str, str, int]]:
    """Every ``(module, imported, line)`` where ``imported`` lies in a higher layer."""
    found = []
    for module, edges in sorted(graph.items()):
        here = layer_of(module, layers)
        for target, line in sorted(edges.items()):
            if not graph.get(target) and _is_package_face(target, graph):
                continue  # an __init__ that imports nothing
            there = layer_of(target, layers)
            if here is not None and there is not None and there > here:
                found.append((module, target, line))
    return found


def _is_package_face(name: str, graph: Graph) -> bool:
    return any(other.startswith(name + ".") for other in graph)


def _modules(root: Path, package: str) -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (source file, whether it is a package's ``__init__``)."""
    found: dict[str, tuple[Path, bool]] = {}
    for path in sorted(root.rglob("*.py")):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        is_package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(
    tree: ast.AST, *, at_import_time: bool = False, type_checking: bool = False
) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement, at any depth, outside ``if TYPE_CHECKING:`` bodies (inside
    them too with ``type_checking``); with ``at_import_time``, only those that run when the
    module is imported (outside function bodies too)."""
    skipped = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda) if at_import_time else ()
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, skipped):
                continue
            if isinstance(child, ast.If) and _is_type_checking(child) and not type_checking:
                stack.extend(child.orelse)
            elif isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child
            else:
                stack.append(child)


def import_graph(root: Path, package: str, *, type_checking: bool = False) -> Graph:
    """The import edges between the modules of ``package``, whose sources lie in ``root``
    (with ``type_checking``, the imports made for annotations only count too)."""
    modules = _modules(root, package)

    def owner(name: str) -> str | None:
        """The module ``name`` is, or lies in (``pkg.mod.attr`` -> ``pkg.mod``)."""
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: Graph = {}
    for module, (path, is_package) in modules.items():
        edges: dict[str, int] = {}
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in _import_nodes(tree, type_checking=type_checking):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    here = module.split(".") if is_package else module.split(".")[:-1]
                    here = here[: len(here) - node.level + 1]
                    base = ".".join([*here, base] if base else here)
                # ``from pkg import mod`` imports the module; ``from mod import name`` the module.
                targets = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                    for alias in node.names
                ]
            for target in targets:
                if target != package and not target.startswith(package + "."):
                    continue
                resolved = owner(target)
                if resolved is None:
                    continue
                parts = resolved.split(".")
                parents = [".".join(parts[:i]) for i in range(2, len(parts))]
                for name in [resolved, *parents]:
                    inside = module == name or module.startswith(name + ".")
                    if name in modules and not (inside and name != resolved):
                        edges.setdefault(name, node.lineno)
        edges.pop(module, None)
        graph[module] = edges
    return graph


def find_cycle(graph: Graph) -> list[str] | None:
    """One import circle as ``[a, b, ..., a]``, or ``None`` when the graph is acyclic."""
    done: set[str] = set()
    for start in sorted(graph):
        if start in done:
            continue
        path: list[str] = [start]
        on_path = {start}
        pending = [iter(sorted(graph[start]))]
        while pending:
            target = next(pending[-1], None)
            if target is None:
                done.add(path[-1])
                on_path.discard(path.pop())
                pending.pop()
            elif target in on_path:
                return [*path[path.index(target) :], target]
            elif target not in done and target in graph:
                path.append(target)
                on_path.add(target)
                pending.append(iter(sorted(graph[target])))
    return None


def _describe(cycle: list[str], graph: Graph, root: Path, package: str) -> str:
    modules = _modules(root, package)
    steps = []
    for a, b in itertools.pairwise(cycle):
        path = modules[a][0].relative_to(root.parent)
        steps.append(f"  {a} -> {b}  ({path}:{graph[a][b]})")
    return "import circle:\n" + "\n".join(steps)


@pytest.fixture(scope="module")
def source_root() -> Path:
    return Path(dlopt.__file__).parent


@pytest.fixture(scope="module")
def graph(source_root: Path) -> Graph:
    return import_graph(source_root, "dlopt")


def test_dlopt_has_no_import_cycles(source_root: Path) -> None:
    """Annotation-only imports count: a circle of types is a tangle too."""
    graph = import_graph(source_root, "dlopt", type_checking=True)
    pruned = {
        module: {t: line for t, line in edges.items() if (module, t) not in PENDING_EDGES}
        for module, edges in graph.items()
    }
    cycle = find_cycle(pruned)
    assert cycle is None, _describe(cycle, graph, source_root, "dlopt")


#: Every first-party distribution's import packages (the providers and the worked
#: third-party example), read from this checkout.
REPOSITORY = Path(__file__).resolve().parents[4]
DISTRIBUTION_PACKAGES = sorted(
    path
    for pattern in ("packages/*/src/*", "examples/*/src/*")
    for path in REPOSITORY.glob(pattern)
    if (path / "__init__.py").is_file() and path.name != "dlopt"
)


def test_every_provider_distribution_is_checked() -> None:
    names = {path.name for path in DISTRIBUTION_PACKAGES}
    assert {"dlopt_fx", "dlopt_onnxruntime", "dlopt_torchao", "dlopt_tensorrt"} <= names


@pytest.mark.parametrize("root", DISTRIBUTION_PACKAGES, ids=lambda p: p.name)
def test_a_provider_distribution_has_no_import_cycles(root: Path) -> None:
    graph = import_graph(root, root.name, type_checking=True)
    cycle = find_cycle(graph)
    assert cycle is None, _describe(cycle, graph, root, root.name)


@pytest.mark.parametrize("root", DISTRIBUTION_PACKAGES, ids=lambda p: p.name)
def test_a_provider_distribution_sits_above_dlopt_and_uses_its_plugin_face(root: Path) -> None:
    """The layer above all of ``dlopt``: from dlopt it imports ``dlopt.plugin`` only (its
    SDKs and other distributions are its own business)."""
    deep = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in _import_nodes(tree, type_checking=True):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
            )
            deep += [
                f"{path.relative_to(root.parent)}:{node.lineno} imports {name}"
                for name in names
                if (name == "dlopt" or name.startswith("dlopt.")) and name != "dlopt.plugin"
            ]
    assert deep == []


@pytest.mark.parametrize(
    "edge", sorted(PENDING_EDGES), ids=lambda e: "->".join(e) if isinstance(e, tuple) else str(e)
)
def test_pending_edges_still_exist(graph: Graph, edge: tuple[str, str]) -> None:
    source, target = edge
    assert target in graph.get(source, {}), (
        f"{source} -> {target} is cut: remove it from PENDING_EDGES"
    )


def test_no_module_imports_from_the_package_face(graph: Graph) -> None:
    """``dlopt/__init__`` is for users; inside the package a name comes from its module."""
    assert [m for m, edges in graph.items() if "dlopt" in edges and m != "dlopt.__main__"] == []


def test_the_report_schema_does_not_import_the_loader(graph: Graph) -> None:
    assert "dlopt.plugins.discovery" not in graph["dlopt.evidence.report"]


@pytest.mark.parametrize(
    ("module", "allowed"),
    [
        ("dlopt._version", set()),
        ("dlopt.platform.machine", set()),
        ("dlopt.platform.names", {"dlopt.errors"}),
        ("dlopt.contract.records", set()),
        ("dlopt.cli.console", set()),
    ],
)
def test_leaf_modules_stay_leaves(graph: Graph, module: str, allowed: set[str]) -> None:
    assert set(graph[module]) <= allowed


def test_every_module_has_a_layer(graph: Graph) -> None:
    assert [m for m in graph if layer_of(m) is None] == []


def test_no_module_imports_from_a_higher_layer(graph: Graph) -> None:
    names = [name for name, _ in LAYERS]
    upward = [
        f"  {m} ({names[layer_of(m)]}) -> {t} ({names[layer_of(t)]}), line {line}"  # type: ignore[index]
        for m, t, line in upward_edges(graph)
    ]
    assert upward == [], "imports from a higher layer:\n" + "\n".join(upward)


def test_the_top_level_holds_at_most_ten_modules(source_root: Path) -> None:
    modules = sorted(p.name for p in source_root.glob("*.py"))
    assert len(modules) <= 10, modules


#: File names that more than one module of dlopt carries, each with the reason it may
#: (docs/architecture.md says the same); every other file name is unique.
SHARED_FILE_NAMES = {
    "__init__.py": "every package has one",
    "metrics.py": (
        "dlopt.validation.metrics computes a plan's validation metrics; dlopt.serving.metrics "
        "is the public module a deployment imports for Prometheus (its name is API)"
    ),
}


def test_no_two_modules_share_a_file_name(source_root: Path) -> None:
    by_name: dict[str, list[str]] = {}
    for path in sorted(source_root.rglob("*.py")):
        by_name.setdefault(path.name, []).append(str(path.relative_to(source_root)))
    shared = {n: p for n, p in by_name.items() if len(p) > 1 and n not in SHARED_FILE_NAMES}
    assert shared == {}


# ---------------------------------------------------------------------------- the checker


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "pkg"
    for name, text in {"__init__.py": "", **files}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_a_function_level_import_closes_a_circle(tmp_path: Path) -> None:
    root = _package(
        tmp_path,
        {"a.py": "from pkg.b import g\n", "b.py": "def g():\n    from pkg import a\n"},
    )
    graph = import_graph(root, "pkg")
    assert find_cycle(graph) in (["pkg.a", "pkg.b", "pkg.a"], ["pkg.b", "pkg.a", "pkg.b"])


def test_type_checking_imports_do_not_count(tmp_path: Path) -> None:
    root = _package(
        tmp_path,
        {
            "a.py": "from pkg.b import g\n",
            "b.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from pkg.a import x\n"
                "else:\n    import json\n"
            ),
        },
    )
    assert find_cycle(import_graph(root, "pkg")) is None


def test_relative_imports_and_subpackage_faces_count(tmp_path: Path) -> None:
    root = _package(
        tmp_path,
        {
            "sub/__init__.py": "from .inner import f\n",
            "sub/inner.py": "from ..top import h\n",
            "top.py": "def h():\n    from pkg.sub.other import z\n",
            "sub/other.py": "",
        },
    )
    graph = import_graph(root, "pkg")
    assert "pkg.top" in graph["pkg.sub.inner"]
    # pkg.top imports pkg.sub.other, which runs pkg.sub first: that closes the circle.
    assert set(graph["pkg.top"]) == {"pkg.sub.other", "pkg.sub"}
    assert find_cycle(graph) == ["pkg.sub", "pkg.sub.inner", "pkg.top", "pkg.sub"]


#: A gate (low layer) that reaches up into a stage (high layer) inside a function.
_GATE_IMPORTS_STAGE = {
    "low/__init__.py": "",
    "low/gate.py": "def f():\n    from pkg.high.stage import g\n",
    "high/__init__.py": "",
    "high/stage.py": "from pkg.low.gate import f\n",
}


def test_an_import_from_a_higher_layer_is_found(tmp_path: Path) -> None:
    layers = (("low", ("pkg.low",)), ("high", ("pkg.high", "pkg")))
    graph = import_graph(_package(tmp_path, _GATE_IMPORTS_STAGE), "pkg")
    assert upward_edges(graph, layers) == [("pkg.low.gate", "pkg.high.stage", 2)]
    assert layer_of("pkg.high.stage", layers) == 1
    assert layer_of("pkg.lowly", layers) == 1  # a prefix matches whole names only


def test_the_longest_prefix_decides_the_layer() -> None:
    layers = (("low", ("a.b.c",)), ("high", ("a",)))
    assert layer_of("a.b.c.d", layers) == 0
    assert layer_of("a.b", layers) == 1
    assert layer_of("x", layers) is None


# ------------------------------------------------------------- optional SDKs stay optional

#: Packages of dlopt-core's extras: no module of dlopt imports them when it is imported
#: (only inside the functions that use them), so ``import dlopt`` and every command but
#: the one that needs them work without them installed.
EXTRAS_AT_CALL_TIME = (
    "ray",
    "fsspec",
    "matplotlib",
    "safetensors",
    "prometheus_client",
    "pytriton",
    "starlette",
)


def _top_names(node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name.split(".")[0] for alias in node.names]
    return [] if node.level or not node.module else [node.module.split(".")[0]]


def test_no_module_imports_an_extra_at_import_time(source_root: Path) -> None:
    found = [
        f"{path.relative_to(source_root)}:{node.lineno} imports {name}"
        for path in sorted(source_root.rglob("*.py"))
        for node in _import_nodes(ast.parse(path.read_text(encoding="utf-8")), at_import_time=True)
        for name in _top_names(node)
        if name in EXTRAS_AT_CALL_TIME
    ]
    assert found == []


def test_only_the_fleet_and_the_serve_app_import_ray(source_root: Path) -> None:
    importers = {
        str(path.relative_to(source_root))
        for path in sorted(source_root.rglob("*.py"))
        for node in _import_nodes(ast.parse(path.read_text(encoding="utf-8")))
        if "ray" in _top_names(node)
    }
    assert {p for p in importers if not p.startswith("fleet/")} <= {"cli/serve_app.py"}


def test_an_import_inside_a_function_is_not_an_import_time_import() -> None:
    tree = ast.parse(
        "import os\nif TYPE_CHECKING:\n    import ray\nclass A:\n    import json\n"
        "def f():\n    import ray\n"
    )
    found = _import_nodes(tree, at_import_time=True)
    assert sorted(_top_names(n)[0] for n in found) == ["json", "os"]


def test_the_extras_are_never_requirements() -> None:
    """dlopt-core's own requirements name none of its extras' packages (a serving box that
    only reuses records installs dlopt-core alone)."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib

    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    required = {
        re.split(r"[\s<>=!~;\[]", r, maxsplit=1)[0].lower() for r in project["dependencies"]
    }
    assert required.isdisjoint(EXTRAS_AT_CALL_TIME)
    assert any(r.startswith("ray") for r in project["optional-dependencies"]["fleet"])
