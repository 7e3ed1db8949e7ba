"""Torch-TensorRT compatibility, decided from installed metadata and version tables.

Nothing here imports torch_tensorrt or tensorrt.

* torch pairing: each torch-tensorrt release is built against one torch minor
  (torch-tensorrt 2.Y pairs with torch 2.Y) and says so in its wheel metadata as
  ``Requires-Dist: torch<2.(Y+1),>=2.Y...``. We read that requirement with
  ``importlib.metadata.requires`` and fall back to the X.Y rule when it is absent.
* GPU generation: each TensorRT major supports GPUs from some compute capability up.
"""

from __future__ import annotations

import importlib.metadata

from attrs import frozen
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from dlopt.plugin import base_version, version_satisfies

DISTRIBUTION = "torch-tensorrt"

#: Oldest compute capability each TensorRT major runs on, newest major first. TensorRT 10
#: needs Turing (7.5) or newer: Pascal and Volta are not supported by the 10.x releases
#: Torch-TensorRT 2.x pairs with. TensorRT 8.x ran on Maxwell (5.0) and newer.
MIN_COMPUTE_CAPABILITY: tuple[tuple[int, tuple[int, int]], ...] = (
    (10, (7, 5)),
    (8, (5, 0)),
)


def distribution_requires(name: str) -> list[str] | None:
    """``Requires-Dist`` lines of an installed distribution (no import); ``None`` if absent."""
    try:
        return importlib.metadata.requires(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def torch_requirement(requires: list[str] | None) -> str | None:
    """The specifier torch-tensorrt's metadata puts on ``torch`` (e.g. ``"<2.11,>=2.10"``)."""
    for line in requires or ():
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if canonicalize_name(req.name) != "torch":
            continue
        # Skip requirements that only apply to an extra (``; extra == "..."``).
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        return str(req.specifier) or None
    return None


def tensorrt_requirement(requires: list[str] | None) -> tuple[str, int] | None:
    """``(distribution, major)`` of the TensorRT torch-tensorrt's metadata requires.

    Torch-TensorRT names TensorRT as ``tensorrt``, ``tensorrt-cuXX`` or
    ``tensorrt-cuXX-libs`` with a range (``>=11.0.0,<11.1``); the major comes from its
    lower bound. ``None`` when the metadata names no TensorRT or no lower bound.
    """
    for line in requires or ():
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        name = canonicalize_name(req.name)
        if not (name == "tensorrt" or name.startswith("tensorrt-cu")):
            continue
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        for spec in req.specifier:
            if spec.operator in (">=", "==", "~=", ">"):
                try:
                    return name, Version(spec.version.rstrip(".*")).release[0]
                except (InvalidVersion, IndexError):
                    continue
    return None


def _minor(version: str) -> tuple[int, int] | None:
    try:
        release = Version(version).release
    except InvalidVersion:
        return None
    return (release[0], release[1]) if len(release) >= 2 else None


def cuda_index_url(torch_cuda: str | None) -> str:
    """The PyTorch wheel index for the CUDA that torch was built with (``cuXXX`` if none)."""
    if torch_cuda:
        parts = torch_cuda.split(".")
        tag = "cu" + parts[0] + (parts[1] if len(parts) > 1 else "0")
    else:
        tag = "cuXXX"
    return f"https://download.pytorch.org/whl/{tag}"


@frozen
class TorchPairing:
    """Whether the installed torch-tensorrt fits the installed torch."""

    ok: bool
    requirement: str
    source: str  # "metadata" or "version rule"
    message: str | None = None


def check_torch_pairing(
    trt_version: str, torch_version: str, requires: list[str] | None
) -> TorchPairing:
    """Compare torch against torch-tensorrt's own ``Requires-Dist: torch`` (or the X.Y rule)."""
    spec = torch_requirement(requires)
    torch_base = base_version(torch_version)
    if spec is not None:
        if version_satisfies(torch_base, spec):
            return TorchPairing(True, spec, "metadata")
        return TorchPairing(
            False,
            spec,
            "metadata",
            f"torch-tensorrt {trt_version} requires torch{spec} (from its metadata), "
            f"but torch {torch_version} is installed",
        )
    trt_minor, torch_minor = _minor(trt_version), _minor(torch_version)
    rule = f"=={trt_minor[0]}.{trt_minor[1]}.*" if trt_minor else "(unknown)"
    if trt_minor is not None and trt_minor == torch_minor:
        return TorchPairing(True, rule, "version rule")
    return TorchPairing(
        False,
        rule,
        "version rule",
        f"torch-tensorrt {trt_version} pairs with torch{rule} (torch-tensorrt X.Y is built "
        f"for torch X.Y), but torch {torch_version} is installed",
    )


def min_compute_capability(tensorrt_version: str | None) -> tuple[int, int] | None:
    """Oldest GPU generation the installed TensorRT supports (``None``: unknown version)."""
    if not tensorrt_version:
        return None
    try:
        major = Version(tensorrt_version).release[0]
    except (InvalidVersion, IndexError):
        return None
    for table_major, capability in MIN_COMPUTE_CAPABILITY:
        if major >= table_major:
            return capability
    return None
