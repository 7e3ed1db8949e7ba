"""The distributions' metadata agree with each other and publish cleanly.

One version for all distributions, providers pinned to the core minor that implements
their plugin API (as the dlopt-core README's table says), a setuptools floor that reads
the SPDX license expression, a license file in every distribution, long descriptions with
absolute links only (relative ones break on PyPI), sdists that carry the tests, and no
requirement that could replace the user's torch.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from dlopt.contract.provider import PLUGIN_API_VERSION

tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python 3.11+")

ROOT = Path(__file__).resolve().parents[2]
DISTRIBUTIONS = sorted(p.parent for p in (ROOT / "packages").glob("*/pyproject.toml"))
PROVIDERS = [d for d in DISTRIBUTIONS if d.name != "dlopt-core"]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _project(directory: Path) -> dict:
    return tomllib.loads((directory / "pyproject.toml").read_text())


def _core_version() -> Version:
    return Version(_project(ROOT / "packages" / "dlopt-core")["project"]["version"])


def _requirements(project: dict) -> list[Requirement]:
    lines = list(project["project"].get("dependencies", []))
    for extra in project["project"].get("optional-dependencies", {}).values():
        lines.extend(extra)
    return [Requirement(line) for line in lines]


def test_the_distributions_are_found():
    assert {d.name for d in DISTRIBUTIONS} == {
        "dlopt-core",
        "dlopt-fx",
        "dlopt-onnxruntime",
        "dlopt-openvino",
        "dlopt-tensorrt",
        "dlopt-torchao",
    }


@pytest.mark.parametrize("directory", DISTRIBUTIONS, ids=lambda d: d.name)
def test_every_distribution_has_the_core_version(directory: Path):
    assert Version(_project(directory)["project"]["version"]) == _core_version()


@pytest.mark.parametrize("directory", PROVIDERS, ids=lambda d: d.name)
def test_providers_require_the_core_minor_that_implements_their_api(directory: Path):
    core = _core_version()
    (requirement,) = [r for r in _requirements(_project(directory)) if r.name == "dlopt-core"]
    assert requirement.specifier == SpecifierSet(
        f">={core.major}.{core.minor},<{core.major}.{core.minor + 1}"
    )


def test_the_core_readme_maps_this_core_to_its_plugin_api():
    core = _core_version()
    readme = (ROOT / "packages" / "dlopt-core" / "README.md").read_text()
    row = f"| {core.major}.{core.minor}.x | {PLUGIN_API_VERSION} |"
    assert row in readme, f"add the row {row!r} to the dlopt-core README's version table"


@pytest.mark.parametrize("directory", DISTRIBUTIONS, ids=lambda d: d.name)
def test_the_build_system_reads_the_license_expression(directory: Path):
    project = _project(directory)
    (setuptools,) = [
        Requirement(r) for r in project["build-system"]["requires"] if "setuptools" in r
    ]
    # SPDX ``license`` strings and ``license-files`` need setuptools 77.
    assert not setuptools.specifier.contains("76.9"), setuptools
    assert project["project"]["license"] == "Apache-2.0"
    for pattern in project["project"]["license-files"]:
        assert list(directory.glob(pattern)), f"{directory.name}: no file matches {pattern}"
    assert "Apache License" in (directory / "LICENSE").read_text()


@pytest.mark.parametrize("directory", DISTRIBUTIONS, ids=lambda d: d.name)
def test_the_metadata_names_authors_urls_and_classifiers(directory: Path):
    project = _project(directory)["project"]
    assert project["authors"] and project["classifiers"]
    assert {"Homepage", "Source", "Issues"} <= set(project["urls"])
    # A license classifier beside an SPDX expression is an error for setuptools >= 77.
    assert not [c for c in project["classifiers"] if c.startswith("License ::")]


@pytest.mark.parametrize("directory", DISTRIBUTIONS, ids=lambda d: d.name)
def test_the_long_description_links_are_absolute(directory: Path):
    readme = (directory / _project(directory)["project"]["readme"]).read_text()
    relative = [url for url in LINK.findall(readme) if not url.startswith(("https://", "#"))]
    assert relative == [], f"{directory.name}'s README links {relative}, which break on PyPI"


@pytest.mark.parametrize("directory", DISTRIBUTIONS, ids=lambda d: d.name)
def test_the_sdist_carries_the_tests(directory: Path):
    manifest = (directory / "MANIFEST.in").read_text().split("\n")
    assert "graft tests" in manifest
    assert (directory / "tests").is_dir()


@pytest.mark.parametrize("directory", DISTRIBUTIONS, ids=lambda d: d.name)
def test_no_requirement_can_replace_the_users_torch(directory: Path):
    for requirement in _requirements(_project(directory)):
        if requirement.name == "torch-tensorrt":
            pytest.fail(
                f"{directory.name} requires {requirement}: torch-tensorrt 2.N pairs with "
                "torch 2.N, so no static requirement fits every torch"
            )
