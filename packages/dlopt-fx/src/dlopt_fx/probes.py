"""Availability checks for the fx and Inductor plans; cheap and never raising.

Layers: metadata (torch installed, in range) -> module present (found without importing
``torch._dynamo``, whose import alone takes seconds) -> device (a C++ compiler that builds
an OpenMP shared library on CPU; Triton and a capable GPU on CUDA).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tempfile
from functools import lru_cache
from pathlib import Path

from attrs import frozen

from dlopt.plugin import (
    ExecutionTarget,
    ProviderAvailability,
    check_distribution,
    cpu_info,
    cuda_bf16_native,
    distribution_version,
    find_cxx_compiler,
)

TORCH_SPEC = ">=2.4"
TORCH_HINT = "pip install 'torch>=2.4'"
CXX_HINT = (
    "install a C++17 compiler with OpenMP, e.g. `apt-get install g++` (Debian/Ubuntu), "
    "`dnf install gcc-c++`, or `xcode-select --install` plus `brew install libomp` on "
    "macOS; or point the CXX environment variable at one"
)
TRITON_HINT = "pip install triton (CUDA builds of torch normally bring the matching version)"
BF16_CPU_HINT = (
    "run on a CPU with AVX-512 BF16 or AMX (Intel Cooper Lake, Sapphire Rapids or newer; "
    "AMD Zen 4 or newer); the fp32 Inductor plans run here"
)

_TRIVIAL_SOURCE = """
#include <omp.h>
extern "C" int dlopt_probe(int n) {
    int total = 0;
    #pragma omp parallel for reduction(+:total)
    for (int i = 0; i < n; ++i) total += i;
    return total + omp_get_max_threads() * 0;
}
"""


def module_present(name: str) -> bool:
    """True when ``name`` can be imported, without importing it.

    A ``None`` entry in ``sys.modules`` (how tests simulate an absent module) counts as
    absent, as ``import`` would treat it.
    """
    if name in sys.modules:
        return sys.modules[name] is not None
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


@frozen
class CompilerCheck:
    """The C++ compiler Inductor would use on CPU, and whether it built a test library."""

    path: str | None
    version: str | None
    works: bool
    problem: str | None = None


@lru_cache(maxsize=4)
def check_cxx_compiler() -> CompilerCheck:
    """Find the C++ compiler and compile a tiny OpenMP shared library with it (cached)."""
    path, version = find_cxx_compiler()
    if path is None:
        return CompilerCheck(
            None, None, False, "no C++ compiler found (looked at $CXX, g++, c++, clang++)"
        )
    with tempfile.TemporaryDirectory(prefix="dlopt-cxx-probe-") as tmp:
        source = Path(tmp) / "probe.cpp"
        source.write_text(_TRIVIAL_SOURCE)
        command = [
            path,
            "-std=c++17",
            "-shared",
            "-fPIC",
            "-fopenmp",
            "-O0",
            str(source),
            "-o",
            str(Path(tmp) / "probe.so"),
        ]
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.SubprocessError) as exc:
            return CompilerCheck(path, version, False, f"{path} could not be run: {exc}")
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()
        first = detail[0] if detail else f"exit status {result.returncode}"
        return CompilerCheck(
            path,
            version,
            False,
            f"{path} ({version}) cannot build a C++17 OpenMP shared library: {first}",
        )
    return CompilerCheck(path, version, True)


def forget_probe_caches() -> None:
    """Drop cached compiler checks (after installing a compiler, or in tests)."""
    check_cxx_compiler.cache_clear()
    find_cxx_compiler.cache_clear()


def probe_fx() -> ProviderAvailability:
    """The ``fx`` plan needs torch with ``torch.fx`` (part of every torch build)."""
    version, problem = check_distribution("torch", TORCH_SPEC, TORCH_HINT)
    versions = {"torch": version}
    if problem:
        return ProviderAvailability.unavailable(problem, TORCH_HINT, sdk_versions=versions)
    if not module_present("torch.fx"):
        return ProviderAvailability.unavailable(
            "torch.fx is missing from this torch installation",
            f"reinstall torch: {TORCH_HINT}",
            sdk_versions=versions,
        )
    return ProviderAvailability.ok(sdk_versions=versions)


def probe_inductor(device_type: str) -> ProviderAvailability:
    """TorchInductor on ``device_type``: dynamo/inductor present plus the device toolchain."""
    version, problem = check_distribution("torch", TORCH_SPEC, TORCH_HINT)
    versions: dict[str, str | None] = {"torch": version}
    if problem:
        return ProviderAvailability.unavailable(problem, TORCH_HINT, sdk_versions=versions)
    missing = [m for m in ("torch.fx", "torch._dynamo", "torch._inductor") if not module_present(m)]
    if missing:
        return ProviderAvailability.unavailable(
            f"this torch installation lacks {', '.join(missing)} (TorchInductor)",
            f"install a full torch build: {TORCH_HINT}",
            sdk_versions=versions,
        )
    if device_type == "cpu":
        check = check_cxx_compiler()
        details = {"compiler": check.path or "none", "compiler_version": check.version or "unknown"}
        if not check.works:
            return ProviderAvailability.unavailable(
                f"TorchInductor on CPU compiles generated C++, but {check.problem}",
                CXX_HINT,
                sdk_versions=versions,
                details=details,
            )
        return ProviderAvailability.ok(sdk_versions=versions, details=details)
    if device_type == "cuda":
        import torch

        versions["triton"] = distribution_version("triton") or distribution_version(
            "pytorch-triton"
        )
        if not torch.cuda.is_available():
            return ProviderAvailability.unavailable(
                "torch sees no CUDA device",
                "install a CUDA build of torch on a machine with an NVIDIA GPU",
                sdk_versions=versions,
            )
        if not module_present("triton"):
            return ProviderAvailability.unavailable(
                "TorchInductor on CUDA generates Triton kernels, but triton is not installed",
                TRITON_HINT,
                sdk_versions=versions,
            )
        major, minor = torch.cuda.get_device_capability()
        details = {"compute_capability": f"{major}.{minor}"}
        if major < 7:
            return ProviderAvailability.unavailable(
                f"Triton needs compute capability 7.0 or newer; this GPU has {major}.{minor}",
                "use a Volta or newer GPU, or the non-compiled plans",
                sdk_versions=versions,
                details=details,
            )
        return ProviderAvailability.ok(sdk_versions=versions, details=details)
    return ProviderAvailability.unavailable(
        f"TorchInductor plans are offered for cpu and cuda targets, not {device_type}",
        sdk_versions=versions,
    )


def probe_native_bf16(
    target: ExecutionTarget, inductor: ProviderAvailability
) -> ProviderAvailability:
    """The bf16 layer on top of an available ``inductor`` probe: bf16 plans are offered
    only where the device computes bf16 natively (core's ``native_bf16`` rule: AVX-512 BF16
    or AMX on CPU, compute capability 8.0+ on CUDA, emulation not counted); emulated bf16
    is slower than fp32 and would only cost the race a compile."""
    versions, details = inductor.sdk_versions, dict(inductor.details)
    if target.device_type == "cuda":
        if not cuda_bf16_native(target.torch_device().index):
            return ProviderAvailability.unavailable(
                "this GPU has no native bf16 (needs compute capability 8.0+): bf16 would "
                "be emulated and slower than fp32",
                "use an Ampere or newer GPU; the fp32 Inductor plans run here",
                sdk_versions=versions,
                details=details,
            )
        return ProviderAvailability.ok(sdk_versions=versions, details=details)
    cpu = cpu_info()
    details["isa"] = ",".join(cpu.isa_flags) or "none of interest"
    if not cpu.fast_bf16:
        return ProviderAvailability.unavailable(
            f"CPU ({cpu.model}) lacks AVX-512 BF16 and AMX: bf16 would be emulated and "
            "slower than fp32",
            BF16_CPU_HINT,
            sdk_versions=versions,
            details=details,
        )
    return ProviderAvailability.ok(sdk_versions=versions, details=details)
