"""docs/architecture.md holds the code to one word per concept, and its map to the tree.

* Every name in the glossary's "in code" column is defined in the sources (a class,
  function, attribute, enum member or module of a first-party distribution).
* Every retired name (its "Retired names" table) is gone from code, docs and the CLI, but
  where a deprecated alias keeps it working (those places are listed here, with why).
* Every folder of the module map is a package of dlopt, and every package is on the map;
  every module is named in its folder's entry (a package in :data:`MAPPED_AS_GROUP`
  may be named as a whole) and in its package's docstring.
* Every enum derives from the one vocabulary base (``TextEnum``).
"""

from __future__ import annotations

import ast
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import dlopt
from dlopt.cli.app import build_parser

REPOSITORY = Path(__file__).resolve().parents[4]
ARCHITECTURE = REPOSITORY / "docs" / "architecture.md"
SOURCES = sorted(
    path
    for pattern in ("packages/*/src/**/*.py", "examples/*/src/**/*.py")
    for path in REPOSITORY.glob(pattern)
)

#: Where a retired name may still appear, and why: the deprecated aliases that keep old
#: code working (each warns), their tests, and the pages that list the retired names.
ALIAS_PLACES = {
    "CHANGELOG.md": "lists every retired name and when it goes",
    "docs/architecture.md": "the retired-names table",
    "packages/dlopt-core/src/dlopt/__init__.py": "dlopt.ExecutionProvider, retired",
    "packages/dlopt-core/src/dlopt/plugin.py": "dlopt.plugin's retired names",
    "packages/dlopt-core/src/dlopt/contract/provider.py": "its retired names; comes_back and "
    "check read with a warning",
    "packages/dlopt-core/src/dlopt/cli/objectives.py": "--strategy, retired for --objective",
    "packages/dlopt-core/tests/core/test_retired_names.py": "the aliases still work and warn",
    "packages/dlopt-core/tests/core/test_glossary.py": "this table names the alias places",
    "packages/dlopt-core/tests/selection/test_objective_cli.py": "--strategy still works",
}

#: Packages the module map may name as a whole, and why: each of their modules is still
#: named in the package's docstring.
MAPPED_AS_GROUP = {
    "cli": "one module per command and its helpers; the map names the commands",
}


def _table(heading: str) -> list[list[str]]:
    """The rows of the first markdown table after ``heading``, as cells."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    section = text[text.index(heading) :]
    rows = []
    for line in section.splitlines()[1:]:
        if line.startswith("|"):
            rows.append([cell.strip() for cell in line.strip("|").split("|")])
        elif rows:
            break
    return rows[2:]  # past the header and its rule


def _names(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def _defined() -> set[str]:
    """Every class, function, attribute, constant and enum member the sources define."""
    found: set[str] = set()
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                found.add(node.name)
            elif isinstance(node, ast.Assign):
                found |= {t.id for t in node.targets if isinstance(t, ast.Name)}
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                found.add(node.target.id)
    return found


def _module_exists(dotted: str) -> bool:
    parts = dotted.split(".")
    for root in REPOSITORY.glob("packages/*/src"):
        path = root.joinpath(*parts)
        if path.with_suffix(".py").is_file() or (path / "__init__.py").is_file():
            return True
    return False


def test_every_name_the_glossary_gives_exists_in_the_code() -> None:
    defined = _defined()
    missing = []
    for word, _means, in_code in _table("## Glossary"):
        for name in _names(in_code):
            if name.startswith(("dlopt.", "dlopt_")):
                ok = _module_exists(name)
            else:
                ok = all(part in defined for part in name.split(".") if part)
            if not ok:
                missing.append(f"{word}: {name}")
    assert missing == []


def _tracked(*patterns: str) -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", *patterns], cwd=REPOSITORY, capture_output=True, text=True, check=True
    ).stdout.split()
    return [REPOSITORY / name for name in listed if not name.startswith("docs/benchmarks/")]


def _occurrences(name: str) -> Iterator[str]:
    """``file:line`` of every use of ``name`` in code and docs outside the alias places."""
    if name.startswith("--"):
        pattern = re.compile(re.escape(name) + r"(?![\w-])")
    else:
        pattern = re.compile(r"(?<![\w.])" + re.escape(name) + r"(?![\w])")
    for path in _tracked("*.py", "*.md", "*.toml", "*.sh"):
        where = path.relative_to(REPOSITORY).as_posix()
        if where in ALIAS_PLACES or not path.is_file():
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if pattern.search(line):
                yield f"{where}:{number}"


def test_retired_names_are_gone_but_where_an_alias_keeps_them() -> None:
    rows = _table("### Retired names")
    assert rows, "the retired-names table is empty or moved"
    found = {}
    for retired, now in rows:
        (old,) = _names(retired)
        uses = list(_occurrences(old))
        if uses:
            found[f"{old} (now {_names(now)[0]})"] = uses[:5]
        if old.startswith(("dlopt.", "dlopt_")):
            assert not _module_exists(old), f"module {old} still exists"
    assert found == {}


def test_the_cli_offers_no_retired_flag() -> None:
    retired = {_names(r)[0] for r, _ in _table("### Retired names") if r.startswith("`--")}
    parser = build_parser()
    offered = set()
    for action in parser._subparsers._group_actions:  # type: ignore[union-attr]
        for sub in action.choices.values():
            for option in sub._actions:
                if option.help != "==SUPPRESS==" and "deprecated" not in (option.help or ""):
                    offered |= set(option.option_strings)
    assert retired & offered == set()


def _map_entries() -> dict[str, str]:
    """The module map's entries: each folder's text by its name (``""``: the top level)."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    block = text[text.index("## The module map") :].split("```")[1]
    entries: dict[str, str] = {}
    folder = ""
    for line in block.splitlines():
        start = re.match(r"^  (\w+)/", line)
        if start:
            folder = start.group(1)
        entries[folder] = entries.get(folder, "") + line + "\n"
    return entries


def _modules() -> dict[str, set[str]]:
    """dlopt's modules by package (``""``: the top level, ``__init__`` included)."""
    root = Path(dlopt.__file__).parent
    found = {"": {p.stem for p in root.glob("*.py")}}
    for init in root.glob("*/__init__.py"):
        found[init.parent.name] = {p.stem for p in init.parent.glob("*.py")} - {"__init__"}
    return found


def _named(name: str, text: str) -> bool:
    """Whether ``text`` names module ``name`` as a word (``dlopt.models`` is not ``models``)."""
    return re.search(r"(?<![\w.])" + re.escape(name) + r"(?!\w)", text) is not None


def test_every_folder_on_the_map_is_a_package_and_every_package_is_on_it() -> None:
    mapped = set(_map_entries()) - {""}
    packages = set(_modules()) - {""}
    assert mapped == packages


def test_every_module_is_on_the_map() -> None:
    entries = _map_entries()
    unmapped = [
        f"{package}/{name}.py" if package else f"{name}.py"
        for package, names in sorted(_modules().items())
        if package not in MAPPED_AS_GROUP
        for name in sorted(names)
        if not _named(name, entries.get(package, ""))
    ]
    assert unmapped == []


def test_every_module_is_named_in_its_package_docstring() -> None:
    root = Path(dlopt.__file__).parent
    unnamed = []
    for package, names in sorted(_modules().items()):
        if not package:
            continue
        tree = ast.parse((root / package / "__init__.py").read_text(encoding="utf-8"))
        docstring = ast.get_docstring(tree) or ""
        for name in sorted(names):
            if f"``{name}``" not in docstring and f"dlopt.{package}.{name}" not in docstring:
                unnamed.append(f"dlopt.{package}.{name}")
    assert unnamed == []


def test_every_enum_derives_from_the_vocabulary_base() -> None:
    plain = []
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ClassDef):
                continue
            bases = {ast.unparse(base) for base in node.bases}
            enum_bases = {"enum.Enum", "Enum", "enum.IntEnum", "enum.StrEnum"}
            if bases & enum_bases and node.name != "TextEnum":
                plain.append(f"{path.relative_to(REPOSITORY)}: {node.name}")
    assert plain == []


@pytest.mark.parametrize("alias", sorted(ALIAS_PLACES))
def test_every_alias_place_exists(alias: str) -> None:
    assert (REPOSITORY / alias).is_file(), f"{alias} is gone: drop it from ALIAS_PLACES"
