"""Which torch versions each torchao release works with, decided from metadata alone.

torchao ships C++/CUDA kernels compiled against one torch version, plus a Python API
that works across a few. Its maintainers publish the pairing in the "torchao release
compatibility table" (pytorch/ao issue #2919); from 0.17 on the kernels use torch's
stable ABI, so one build serves torch 2.11 and every later torch. The table below encodes
those published rows. Mismatches come in two strengths:

* ``python-api-only``: torch is one the Python API supports, but not the one the kernels
  were built for. torchao itself then skips loading its C++ extensions; the schemes this
  package offers run on torch's own kernels (``torch._int_mm``, ``_weight_int4pack_mm*``,
  ``_scaled_mm``), so they still work.
* ``unsupported``: torch is older than anything the release supports; torchao may fail
  at import or mid-build. The probe refuses and names a release that fits.

A release missing from the table (older than 0.12, or newer than this file) is
``untested``: allowed, with a note, since the build and validation still check it.
"""

from __future__ import annotations

from attrs import frozen
from packaging.version import InvalidVersion, Version

from dlopt.plugin import TextEnum


class Compatibility(TextEnum):
    SUPPORTED = "supported"
    PYTHON_API_ONLY = "python-api-only"
    UNTESTED = "untested"
    UNSUPPORTED = "unsupported"


@frozen
class TorchaoRelease:
    """One row of torchao's published compatibility table (torch as (major, minor))."""

    torchao: tuple[int, int]
    #: torch minors the C++ kernels were built for.
    kernels_for: tuple[tuple[int, int], ...]
    #: Oldest and newest torch minor the Python API supports (newest ``None``: open).
    python_api: tuple[tuple[int, int], tuple[int, int] | None]
    #: Kernels built on torch's stable ABI: every torch >= min(kernels_for) loads them.
    abi_stable: bool = False


#: Newest first. Source: pytorch/ao issue #2919 (the table), torchao 0.17 release notes
#: (stable ABI, torch >= 2.11). 0.14 and 0.15 differ in the patch release they were built
#: against (2.9.0 vs 2.9.1); at minor granularity both pair with torch 2.9.
RELEASES: tuple[TorchaoRelease, ...] = (
    TorchaoRelease((0, 18), ((2, 11),), ((2, 9), None), abi_stable=True),
    TorchaoRelease((0, 17), ((2, 11),), ((2, 9), None), abi_stable=True),
    TorchaoRelease((0, 16), ((2, 10),), ((2, 8), (2, 10))),
    TorchaoRelease((0, 15), ((2, 9),), ((2, 7), (2, 9))),
    TorchaoRelease((0, 14), ((2, 9),), ((2, 7), (2, 9))),
    TorchaoRelease((0, 13), ((2, 8),), ((2, 6), (2, 8))),
    TorchaoRelease((0, 12), ((2, 5), (2, 6), (2, 7)), ((2, 5), (2, 7))),
)


@frozen
class CompatibilityVerdict:
    """How an installed torchao pairs with the installed torch, and what to do about it."""

    status: Compatibility
    message: str
    fix: str | None = None

    @property
    def usable(self) -> bool:
        return self.status is not Compatibility.UNSUPPORTED


def _minor(version: str) -> tuple[int, int] | None:
    try:
        release = Version(version).release
    except InvalidVersion:
        return None
    if len(release) < 2:
        return None
    return release[0], release[1]


def _fmt(minor: tuple[int, int]) -> str:
    return f"{minor[0]}.{minor[1]}"


def release_row(torchao_version: str) -> TorchaoRelease | None:
    """The table row for ``torchao_version`` (matched on major.minor), if any."""
    key = _minor(torchao_version)
    return next((row for row in RELEASES if row.torchao == key), None)


def _python_api_covers(row: TorchaoRelease, torch_minor: tuple[int, int]) -> bool:
    low, high = row.python_api
    return torch_minor >= low and (high is None or torch_minor <= high)


def _kernels_cover(row: TorchaoRelease, torch_minor: tuple[int, int]) -> bool:
    if row.abi_stable:
        return torch_minor >= min(row.kernels_for)
    return torch_minor in row.kernels_for


def recommended_torchao(torch_version: str) -> str | None:
    """The newest torchao release whose kernels pair with ``torch_version``, else the
    newest whose Python API does; as a pip requirement (``"torchao==0.16.*"``)."""
    torch_minor = _minor(torch_version)
    if torch_minor is None:
        return None
    for test in (_kernels_cover, _python_api_covers):
        for row in RELEASES:
            if test(row, torch_minor):
                return f"torchao=={_fmt(row.torchao)}.*"
    return None


def check_torch_pairing(torchao_version: str, torch_version: str) -> CompatibilityVerdict:
    """Classify the (torchao, torch) pair from versions alone: nothing is imported."""
    row = release_row(torchao_version)
    torch_minor = _minor(torch_version)
    if row is None or torch_minor is None:
        return CompatibilityVerdict(
            Compatibility.UNTESTED,
            f"torchao {torchao_version} is not in the compatibility table dlopt-torchao knows "
            f"(torchao {_fmt(RELEASES[-1].torchao)}-{_fmt(RELEASES[0].torchao)}); "
            "builds are still validated",
        )
    if _kernels_cover(row, torch_minor):
        return CompatibilityVerdict(
            Compatibility.SUPPORTED,
            f"torchao {torchao_version} supports torch {torch_version} (C++ kernels included)",
        )
    recommended = recommended_torchao(torch_version)
    fix = f'pip install "{recommended}"' if recommended else None
    built_for = ", ".join(_fmt(m) for m in row.kernels_for)
    if _python_api_covers(row, torch_minor):
        return CompatibilityVerdict(
            Compatibility.PYTHON_API_ONLY,
            f"torchao {torchao_version} kernels are built for torch {built_for}; with torch "
            f"{torch_version} only its Python API is supported (its C++ extensions are "
            "skipped; the schemes offered here use torch's own kernels)",
            fix,
        )
    low, high = row.python_api
    if torch_minor < low:
        return CompatibilityVerdict(
            Compatibility.UNSUPPORTED,
            f"torchao {torchao_version} needs torch >= {_fmt(low)}, found torch {torch_version}",
            fix or "upgrade torch",
        )
    assert high is not None  # an open upper bound covers every newer torch
    return CompatibilityVerdict(
        Compatibility.UNTESTED,
        f"torchao {torchao_version} was released for torch {_fmt(low)}-{_fmt(high)}; torch "
        f"{torch_version} is newer than its published support (its C++ extensions are "
        "skipped)",
        fix,
    )
