"""Building blocks for layered availability probes.

Layer 1, metadata: is the distribution installed, in a supported version? (no import)
Layer 2, import: does the SDK import, and what can it do?
Layer 3, device: can the target device actually run it? (cheap functional checks)

Providers combine these; each layer returns a reason a user can act on.
"""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
from functools import lru_cache
from types import ModuleType

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

if sys.version_info >= (3, 12):
    from importlib import metadata as importlib_metadata
else:  # 3.10/3.11: the backport has the selectable EntryPoints API with .dist everywhere
    import importlib_metadata


def distribution_version(name: str) -> str | None:
    """Installed version of distribution ``name`` without importing it; ``None`` if absent."""
    try:
        return importlib_metadata.version(name)
    except importlib_metadata.PackageNotFoundError:
        return None


def version_satisfies(version: str, spec: str) -> bool:
    """True when ``version`` lies in the PEP 440 range ``spec`` (local labels ignored)."""
    try:
        return Version(version) in SpecifierSet(spec, prereleases=True)
    except (InvalidVersion, InvalidSpecifier):
        return False


def base_version(version: str) -> str:
    """``"2.13.0+cpu"`` -> ``"2.13.0"``."""
    try:
        return Version(version).base_version
    except InvalidVersion:
        return version


def check_distribution(
    name: str, spec: str | None, install_hint: str
) -> tuple[str | None, str | None]:
    """Metadata layer: ``(version, problem)``; ``problem`` is ``None`` when usable."""
    version = distribution_version(name)
    if version is None:
        return None, f"{name} is not installed ({install_hint})"
    if spec and not version_satisfies(version, spec):
        return version, f"{name} {version} is installed but {spec} is required"
    return version, None


def try_import(module: str) -> tuple[ModuleType | None, str | None]:
    """Import layer: ``(module, None)`` or ``(None, "<ExcType>: message")``.

    Catches everything: a broken SDK can raise OSError (missing shared library) or even
    RuntimeError at import; the probe reports it instead of crashing.
    """
    try:
        return importlib.import_module(module), None
    except BaseException as exc:
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        return None, f"{type(exc).__name__}: {exc}"


@lru_cache(maxsize=1)
def find_cxx_compiler() -> tuple[str | None, str | None]:
    """``(path, version line)`` of the C++ compiler Inductor would use on CPU, if any.

    Inductor honours the ``CXX`` environment variable, then looks for g++/clang++.
    """
    import os

    candidates = [os.environ.get("CXX"), "g++", "c++", "clang++"]
    for name in candidates:
        if not name:
            continue
        path = shutil.which(name)
        if not path:
            continue
        try:
            out = subprocess.run(
                [path, "--version"], capture_output=True, text=True, timeout=10, check=True
            )
        except (OSError, subprocess.SubprocessError):
            continue
        first_line = (out.stdout or out.stderr).strip().splitlines()
        return path, first_line[0] if first_line else "unknown version"
    return None, None
