"""The pages a user reads say what a user needs, and point where they say they point.

* README.md and every page under docs/ outside docs/benchmarks/ and docs/design/ (the
  provider pages included) name no commit: a run by commit, a fit and a recipe to
  reproduce an old measurement belong to docs/design/ (or the benchmark suite's results).
* Every relative link in README.md, CONTRIBUTING.md and docs/ reaches a file, and every
  ``#anchor`` a heading of that page.
* Every module path a user page names in code (```dlopt.x.y```, ```dlopt_fx.z```) is a
  module of a first-party distribution, or a name one defines.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[4]

#: A commit hash as git prints one: 7 to 40 hex digits with a letter and a digit, a whole
#: word (so ``0x1f2e3d4c``, ``sha256`` and ``deadbeef`` are not one).
COMMIT_LIKE = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")

#: Strings that look like a commit and are not one, where they stand, and why.
NOT_COMMITS = {
    ("docs/fleet.md", "1a2b3c4d"): "a Ray node id in the printed progress lines it quotes",
}

#: Dotted names in user pages that are not Python modules, and what they are.
NOT_MODULES = {
    "dlopt.providers": "the entry-point group providers register in",
    "dlopt.models": "the entry-point group model factories register in",
}

FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
INLINE_CODE = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} (.+?)\s*$", re.M)
MODULE_PATH = re.compile(r"\b(dlopt(?:_[a-z]+)?(?:\.[A-Za-z_]\w*)+)")


def user_pages() -> list[Path]:
    """README.md and every docs page a user reads: not the benchmark results, not design."""
    docs = REPOSITORY / "docs"
    pages = [REPOSITORY / "README.md"]
    for page in sorted(docs.rglob("*.md")):
        top = page.relative_to(docs).parts[0]
        if top not in ("benchmarks", "design"):
            pages.append(page)
    return pages


def linked_pages() -> list[Path]:
    """Every page whose links are checked: the user pages, design, benchmarks, CONTRIBUTING."""
    return [
        REPOSITORY / "README.md",
        REPOSITORY / "CONTRIBUTING.md",
        *sorted((REPOSITORY / "docs").rglob("*.md")),
    ]


def commit_like(text: str) -> list[str]:
    """The commit-hash-like words in ``text``, in order."""
    return COMMIT_LIKE.findall(text)


def _where(path: Path) -> str:
    return path.relative_to(REPOSITORY).as_posix()


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation gone, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


@cache
def _anchors(path: Path) -> frozenset[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    return frozenset(_slug(heading) for heading in HEADING.findall(text))


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("measured at commit 7931ac7 on", ["7931ac7"]),
        ("`git worktree add /tmp/old 823366abc0ffee1`", ["823366abc0ffee1"]),
        (
            "a full hash 4837bf5e0d1c2b3a4f5e6d7c8b9a0f1e2d3c4b5a here",
            ["4837bf5e0d1c2b3a4f5e6d7c8b9a0f1e2d3c4b5a"],
        ),
        ("a constant 0x1f2e3d4c, a word deadbeef, sha256, blake2b", []),
        ("numbers 3343764 and 1073741824, words like decade and faced", []),
        ("six hex 4a5b6c and 41 hex " + "a1" * 20 + "b", []),
    ],
)
def test_what_counts_as_a_commit(text: str, found: list[str]) -> None:
    assert commit_like(text) == found


def test_user_pages_name_no_commit() -> None:
    pages = user_pages()
    assert REPOSITORY / "docs" / "selection.md" in pages
    assert REPOSITORY / "docs" / "providers" / "fx.md" in pages
    named = []
    for page in pages:
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            for word in commit_like(line):
                if (_where(page), word) not in NOT_COMMITS:
                    named.append(f"{_where(page)}:{number}: {word}")
    assert named == [], (
        "a user page names a commit; move the run or the history to docs/design/ "
        "and summarise it in a sentence"
    )


@pytest.mark.parametrize(("where", "word"), sorted(NOT_COMMITS))
def test_every_exception_still_stands_where_it_says(where: str, word: str) -> None:
    assert word in (REPOSITORY / where).read_text(encoding="utf-8"), (
        f"{word} is gone from {where}: drop it from NOT_COMMITS"
    )


def test_every_relative_link_and_anchor_resolves() -> None:
    broken = []
    for page in linked_pages():
        for link in LINK.findall(page.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", link):  # https:, mailto:
                continue
            path, _, anchor = link.partition("#")
            target = (page.parent / path).resolve() if path else page
            if not target.exists():
                broken.append(f"{_where(page)}: {link} (no such file)")
            elif anchor and target.suffix == ".md" and anchor not in _anchors(target):
                broken.append(f"{_where(page)}: {link} (no such heading)")
    assert broken == []


@cache
def _defined_in(module: Path) -> frozenset[str]:
    """Every name a module file defines or imports at any depth (lazy exports included)."""
    tree = ast.parse(module.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        elif isinstance(node, ast.Dict):  # a lazy-export table: {"Name": "module"}
            names |= {k.value for k in node.keys if isinstance(k, ast.Constant)}
    return frozenset(n for n in names if isinstance(n, str))


def module_path_exists(dotted: str) -> bool:
    """Whether ``dotted`` is a first-party module, or a name its deepest module defines."""
    parts = dotted.split(".")
    for root in REPOSITORY.glob("packages/*/src"):
        here, depth = root, 0
        while depth < len(parts):
            if (here / parts[depth] / "__init__.py").is_file():
                here = here / parts[depth]
            elif (here / f"{parts[depth]}.py").is_file():
                here = here / f"{parts[depth]}.py"
            else:
                break
            depth += 1
            if here.suffix == ".py":
                break
        if depth == 0:
            continue
        rest = parts[depth:]
        if not rest:
            return True
        module = here if here.suffix == ".py" else here / "__init__.py"
        if rest[0] in _defined_in(module):
            return True
    return False


def _retired_names() -> set[str]:
    """The names docs/architecture.md lists as retired (its glossary test checks them)."""
    text = (REPOSITORY / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text[text.index("### Retired names") :].split("\n## ", 1)[0]
    return set(INLINE_CODE.findall(section))


def test_every_module_path_a_user_page_names_exists() -> None:
    retired = _retired_names()
    missing = []
    for page in user_pages():
        prose = FENCE.sub("", page.read_text(encoding="utf-8"))
        for code in INLINE_CODE.findall(prose):
            for dotted in MODULE_PATH.findall(code):
                if dotted in NOT_MODULES or dotted in retired:
                    continue
                if not module_path_exists(dotted):
                    missing.append(f"{_where(page)}: {dotted}")
    assert missing == []


def test_the_module_check_tells_a_retired_module() -> None:
    assert module_path_exists("dlopt.cli.demo.build_demo_model")
    assert module_path_exists("dlopt.measurement")
    assert module_path_exists("dlopt_fx.inductor_cache_scope")
    assert not module_path_exists("dlopt.demo.build_demo_model")
    section = (REPOSITORY / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = section[section.index("### Retired names") :].split("\n## ", 1)[0]
    first_cells = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]
    retired_modules = [
        name
        for cell in first_cells
        for name in INLINE_CODE.findall(cell)
        if name.startswith("dlopt.")
    ]
    assert retired_modules, "docs/architecture.md lists no retired dlopt module"
    assert not any(module_path_exists(name) for name in retired_modules)
