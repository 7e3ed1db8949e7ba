"""What OpenVINO is installed here, and which of its devices answer.

Three layers, cheapest first:

1. metadata (no import): ``openvino`` (and, for the int8 plan, ``nncf``) installed in a
   version this plugin was written for;
2. import: ``import openvino`` works (a broken wheel or a missing system library fails
   here, and the reason says so);
3. device: OpenVINO's plugin for the device loads and lists the device. The CPU plugin
   always does; the GPU plugin needs Intel's GPU compute runtime (OpenCL / Level Zero),
   the NPU plugin the Intel NPU driver. A plugin that cannot load says which library is
   missing; one that loads but lists nothing means no device or no driver.

Device answers are cached per process (``clear_probe_cache`` forgets them).
"""

from __future__ import annotations

import glob
import platform
import threading
from collections.abc import Mapping
from typing import Any

from attrs import frozen

from dlopt.plugin import (
    capture_output,
    cpu_flags,
    distribution_version,
    try_import,
    version_satisfies,
)

#: What ``pip install`` brings this plugin and its SDK (the pinned openvino and nncf).
INSTALL_HINT = "pip install dlopt-openvino"
#: The OpenVINO releases whose Python API this plugin uses (the model cache, the runtime
#: model's per-layer precisions, ``convert_model`` on a module with example inputs).
OPENVINO_SPEC = ">=2026.4"
#: NNCF releases whose ``nncf.quantize`` takes an ``openvino.Model`` as the int8 plan calls it.
NNCF_SPEC = ">=3.4"

#: CPU flags of native bf16 arithmetic, the only CPUs where OpenVINO's CPU plugin computes
#: in bf16 (it otherwise ignores the bf16 hint and computes in fp32).
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")

#: CPU flags of int8 dot-product instructions (VNNI, AMX), which multiply u8 x s8 without
#: saturating.
INT8_DOT_FLAGS = frozenset({"avx512_vnni", "avx_vnni", "amx_int8"})

#: Per OpenVINO device type: what a machine needs for the device to be listed, and the
#: device nodes whose presence says whether the kernel driver is there.
DEVICE_NEEDS: Mapping[str, tuple[str, str]] = {
    "GPU": (
        "an Intel GPU with Intel's compute runtime: the OpenCL ICD loader and Intel's OpenCL "
        "driver (e.g. apt-get install ocl-icd-libopencl1 intel-opencl-icd; see OpenVINO's "
        "'Configurations for Intel Processor Graphics (GPU)')",
        "/dev/dri/renderD*",
    ),
    "NPU": (
        "an Intel NPU (Core Ultra and newer) with the Intel NPU driver (linux-npu-driver "
        "releases; see OpenVINO's 'Configurations for Intel NPU')",
        "/dev/accel/accel*",
    ),
    "CPU": ("nothing more: the CPU plugin ships in the openvino wheel", ""),
}


def sdk_versions() -> dict[str, str | None]:
    """Versions of the distributions this plugin uses, from metadata."""
    return {"openvino": distribution_version("openvino"), "nncf": distribution_version("nncf")}


def _metadata_problem(name: str, spec: str, needed_by: str) -> str | None:
    version = distribution_version(name)
    if version is None:
        return f"{name} is not installed; {needed_by} needs it ({INSTALL_HINT})"
    if not version_satisfies(version, spec):
        return (
            f"{name} {version} is installed but {needed_by} needs {name}{spec} "
            f"({INSTALL_HINT} installs the tested release)"
        )
    return None


def import_openvino() -> tuple[Any | None, str | None]:
    """Metadata and import layers: ``(openvino module, None)`` or ``(None, problem)``."""
    problem = _metadata_problem("openvino", OPENVINO_SPEC, "dlopt-openvino")
    if problem is not None:
        return None, problem
    ov, error = try_import("openvino")
    if ov is None:
        version = distribution_version("openvino")
        return None, f"openvino {version} is installed but 'import openvino' fails ({error})"
    return ov, None


def nncf_problem() -> str | None:
    """Why NNCF cannot quantize here (metadata, then import), or ``None``."""
    problem = _metadata_problem("nncf", NNCF_SPEC, "openvino_cpu_int8 (NNCF quantization)")
    if problem is not None:
        return problem
    nncf, error = try_import("nncf")
    if nncf is None:
        return f"nncf {distribution_version('nncf')} is installed but 'import nncf' fails ({error})"
    return None


_core: Any = None
_lock = threading.Lock()


def shared_core(ov: Any) -> Any:
    """One ``openvino.Core`` per process: it loads each device plugin once."""
    global _core
    with _lock:
        if _core is None:
            _core = ov.Core()
        return _core


@frozen
class DeviceCheck:
    """Whether OpenVINO lists one device, and if not, why and what to install."""

    #: OpenVINO's device name (``"CPU"``, ``"GPU.1"``, ``"NPU"``).
    device: str
    usable: bool
    reason: str | None = None
    hint: str | None = None
    #: ``FULL_DEVICE_NAME`` and ``OPTIMIZATION_CAPABILITIES`` as OpenVINO reports them.
    full_name: str | None = None
    capabilities: tuple[str, ...] = ()


_checks: dict[tuple[str, int | None], DeviceCheck] = {}


def clear_probe_cache() -> None:
    """Forget cached device checks (after installing a driver, in tests)."""
    with _lock:
        _checks.clear()


def check_device(ov: Any, device_type: str, index: int | None = None) -> DeviceCheck:
    """Device layer: does OpenVINO's ``device_type`` plugin load and list device ``index``
    (``None``: its default device)? Cached per process."""
    key = (device_type, index)
    with _lock:
        cached = _checks.get(key)
    if cached is None:
        cached = _check_device(ov, device_type, index)
        with _lock:
            _checks[key] = cached
    return cached


def _check_device(ov: Any, device_type: str, index: int | None) -> DeviceCheck:
    version = getattr(ov, "__version__", "?").split("-")[0]
    needs, nodes = DEVICE_NEEDS.get(device_type, (f"a {device_type} device", ""))
    name = device_type if index is None else f"{device_type}.{index}"
    core = shared_core(ov)
    try:
        with capture_output(f"probe openvino {device_type}"):
            listed = [str(d) for d in core.get_property(device_type, "AVAILABLE_DEVICES")]
    except Exception as exc:
        return DeviceCheck(
            name,
            False,
            f"OpenVINO {version}'s {device_type} plugin cannot be loaded: {first_line(exc)}",
            f"{device_type} plans need {needs}",
        )
    if not listed:
        found = sorted(glob.glob(nodes)) if nodes else []
        seen = (
            f"; {', '.join(found)} exist{'s' if len(found) == 1 else ''}, so the driver "
            "may be too old for this OpenVINO or not readable by this user"
            if found
            else f"; no {nodes} exists (no device, or no kernel driver)"
            if nodes
            else ""
        )
        return DeviceCheck(
            name,
            False,
            f"OpenVINO {version}'s {device_type} plugin loads but lists no {device_type} "
            f"device{seen}",
            f"{device_type} plans need {needs}",
        )
    if index is not None and str(index) not in listed and not (index == 0 and listed == [""]):
        return DeviceCheck(
            name,
            False,
            f"OpenVINO {version} lists {device_type} devices {', '.join(listed)}, not {index}",
            f"race on one of them: ExecutionTarget('{device_type.lower()}:N', host='cpu')",
        )
    try:
        full_name = str(core.get_property(name, "FULL_DEVICE_NAME"))
        capabilities = tuple(str(c) for c in core.get_property(name, "OPTIMIZATION_CAPABILITIES"))
    except Exception as exc:
        return DeviceCheck(
            name, False, f"OpenVINO {version} lists {name} but cannot query it: {first_line(exc)}"
        )
    return DeviceCheck(name, True, None, None, full_name, capabilities)


def bf16_problem(capabilities: tuple[str, ...]) -> str | None:
    """Why this CPU cannot run the bf16 plan natively, or ``None``.

    The CPU's own flags decide where they can be read (x86 Linux); elsewhere OpenVINO's
    ``OPTIMIZATION_CAPABILITIES`` does.
    """
    flags = cpu_flags()
    if flags is not None:
        if any(flag in flags for flag in NATIVE_BF16_FLAGS):
            return None
        return (
            "this CPU has no native bf16 arithmetic (neither AVX512-BF16 nor AMX-BF16 among "
            "its flags): OpenVINO's CPU plugin then ignores the bf16 hint and computes in "
            "fp32, so this plan would be openvino_cpu judged under bf16's looser limits. "
            "openvino_cpu and openvino_cpu_int8 run here"
        )
    if "BF16" in capabilities:
        return None
    return (
        "OpenVINO does not list BF16 among this CPU's capabilities "
        f"({', '.join(capabilities) or 'none'}): it would compute in fp32"
    )


def int8_saturates() -> bool:
    """Whether int8 arithmetic saturates here: an x86 CPU without VNNI or AMX, whose
    u8 x s8 multiply-add (``vpmaddubsw``) saturates its 16-bit sums. An x86 CPU whose
    flags cannot be read counts as one."""
    if platform.machine().lower() not in {"x86_64", "amd64", "i386", "i686", "x86"}:
        return False
    flags = cpu_flags()
    return flags is None or not flags & INT8_DOT_FLAGS


def first_line(exc: BaseException | str, limit: int = 400) -> str:
    """The first non-blank line of an SDK message (OpenVINO's start with a source line)."""
    text = str(exc).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    # "Exception from src/inference/src/cpp/core.cpp:77:" says where, the next line what.
    if len(lines) > 1 and lines[0].startswith("Exception from ") and lines[0].endswith(":"):
        lines = lines[1:]
    line = lines[0] if lines else type(exc).__name__
    return line if len(line) <= limit else line[: limit - 3] + "..."
