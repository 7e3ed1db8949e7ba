"""What ONNX Runtime is installed here, and which execution providers actually work.

Three layers, cheapest first:

1. metadata (no import): which flavour distribution is installed (``onnxruntime``,
   ``onnxruntime-gpu``, ``onnxruntime-openvino``...) and whether two are installed at
   once (they ship the same ``onnxruntime`` package and overwrite each other's files);
2. import: does ``onnxruntime`` import, and which execution providers (EPs) was the
   build compiled with (``get_available_providers()``);
3. function: a tiny session created with the EP. ``get_available_providers()`` lists
   what a build was compiled with, not what works: the CUDA EP of ``onnxruntime-gpu``
   is listed even when the CUDA/cuDNN libraries it needs are missing, and the session
   then silently runs on CPU. Such an EP is reported unusable, with ONNX Runtime's own
   message when it printed one. Results are cached per process.
"""

from __future__ import annotations

import importlib.util
import platform
import re
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from attrs import field, frozen

from dlopt.plugin import (
    CapturedOutput,
    capture_output,
    check_distribution,
    cpu_flags,
    distribution_version,
    strip_ansi,
    try_import,
)

#: Supported ONNX Runtime range: 1.18 is the first with every provider option the plans
#: set (the CUDA EP's use_tf32 came in 1.18; user_compute_stream as an option earlier).
ORT_SPEC = ">=1.18"

#: NVIDIA's package index: TensorRT's libraries live there (PyPI has stubs of them).
NVIDIA_INDEX = "https://pypi.nvidia.com"

CPU_INSTALL_HINT = 'pip install "dlopt-onnxruntime[cpu]"'
GPU_INSTALL_HINT = 'pip install "dlopt-onnxruntime[gpu]"'

#: Distribution name -> flavour. All of them install the same ``onnxruntime`` package.
FLAVOURS: Mapping[str, str] = {
    "onnxruntime": "cpu",
    "onnxruntime-gpu": "gpu",
    "onnxruntime-openvino": "openvino",
    "onnxruntime-directml": "directml",
    "onnxruntime-qnn": "qnn",
    "onnxruntime-training": "training",
}

#: Known execution providers: (device type plans with this EP take inputs on, how to
#: get a build that has it).
EP_INFO: Mapping[str, tuple[str, str]] = {
    "CPUExecutionProvider": ("cpu", CPU_INSTALL_HINT),
    "CUDAExecutionProvider": ("cuda", GPU_INSTALL_HINT),
    "TensorrtExecutionProvider": (
        "cuda",
        f"{GPU_INSTALL_HINT}, plus the TensorRT libraries of the major that "
        f"onnxruntime-gpu build links (TensorRT 10 up to 1.31) from {NVIDIA_INDEX}",
    ),
    "OpenVINOExecutionProvider": (
        "cpu",
        "pip uninstall -y onnxruntime onnxruntime-gpu && pip install onnxruntime-openvino "
        "(then install dlopt-onnxruntime without an extra)",
    ),
    "DnnlExecutionProvider": ("cpu", "use an onnxruntime build made with --use_dnnl"),
}


@frozen
class OrtInstallation:
    """The ONNX Runtime distributions installed, read from metadata without importing."""

    versions: dict[str, str] = field(factory=dict)

    @property
    def flavours(self) -> tuple[str, ...]:
        """Installed flavour distributions, e.g. ``("onnxruntime",)``."""
        return tuple(self.versions)

    @property
    def flavour(self) -> str | None:
        """The single installed distribution, or a ``+``-joined list when several are."""
        return "+".join(self.versions) or None

    @property
    def conflict(self) -> str | None:
        """A warning when two flavours are installed in one environment, else ``None``."""
        if len(self.versions) < 2:
            return None
        listed = ", ".join(f"{name} {version}" for name, version in self.versions.items())
        keep = (
            "onnxruntime-gpu" if "onnxruntime-gpu" in self.versions else next(iter(self.versions))
        )
        return (
            f"several ONNX Runtime flavours are installed ({listed}); they ship the same "
            "'onnxruntime' package and overwrite each other's files, so which one runs "
            f"depends on install order. Fix: pip uninstall -y {' '.join(self.versions)} "
            f"&& pip install {keep}"
        )


def detect_installation() -> OrtInstallation:
    """Metadata layer: which flavour distributions are installed (no import)."""
    versions = {name: v for name in FLAVOURS if (v := distribution_version(name)) is not None}
    return OrtInstallation(versions=versions)


@frozen
class EpCheck:
    """Whether one execution provider ran a tiny session, and if not, why."""

    provider: str
    usable: bool
    reason: str | None = None
    #: What ``session.get_providers()`` returned (empty when the session failed).
    session_providers: tuple[str, ...] = ()


_cache: dict[tuple[str, tuple[tuple[str, str], ...]], EpCheck] = {}
_cache_lock = threading.Lock()


def clear_probe_cache() -> None:
    """Forget cached execution-provider checks (after installing a library, in tests)."""
    with _cache_lock:
        _cache.clear()


def sdk_versions() -> dict[str, str | None]:
    """Versions of the SDK distributions this plugin uses, from metadata."""
    versions: dict[str, str | None] = {
        name: v for name in FLAVOURS if (v := distribution_version(name)) is not None
    }
    if not versions:
        versions["onnxruntime"] = None
    versions["onnx"] = distribution_version("onnx")
    versions["onnxscript"] = distribution_version("onnxscript")
    return versions


def check_sdk(install_hint: str) -> tuple[Any | None, str | None, dict[str, str]]:
    """Metadata and import layers: ``(onnxruntime module, problem, details)``."""
    install = detect_installation()
    details: dict[str, str] = {}
    if install.flavour:
        details["flavour"] = install.flavour
    if install.conflict:
        details["conflict"] = install.conflict
    if not install.versions:
        return None, f"ONNX Runtime is not installed ({install_hint})", details
    for name in install.versions:
        _, problem = check_distribution(name, ORT_SPEC, install_hint)
        if problem:
            return None, problem, details
    _, problem = check_distribution("onnx", ">=1.16", 'pip install "onnx>=1.16"')
    if problem:
        return None, f"{problem}; the ONNX export needs it", details
    ort, error = try_import("onnxruntime")
    if ort is None:
        problem = f"{install.flavour} is installed but 'import onnxruntime' fails ({error})"
        if install.conflict:
            problem += f"; {install.conflict}"
        return None, problem, details
    details["compiled_providers"] = ",".join(ort.get_available_providers())
    if distribution_version("onnxscript") is None:
        details["exporter"] = "torchscript only (onnxscript missing: pip install onnxscript)"
    return ort, None, details


def check_execution_provider(
    ort: Any, provider: str, options: Mapping[str, str] | None = None
) -> EpCheck:
    """Functional layer: create and run a tiny session with ``provider`` (cached).

    An EP the build lists but the session does not use (it fell back to CPU) is
    unusable; the reason quotes what ONNX Runtime printed while creating the session.
    """
    key = (provider, tuple(sorted((str(k), str(v)) for k, v in (options or {}).items())))
    with _cache_lock:
        cached = _cache.get(key)
    if cached is not None:
        return cached
    result = _check_execution_provider(ort, provider, dict(key[1]))
    with _cache_lock:
        _cache[key] = result
    return result


def _check_execution_provider(ort: Any, provider: str, options: dict[str, str]) -> EpCheck:
    compiled = list(ort.get_available_providers())
    version = getattr(ort, "__version__", "?")
    flavour = detect_installation().flavour or "onnxruntime"
    if provider not in compiled:
        return EpCheck(
            provider,
            False,
            f"{flavour} {version} was built without {provider} "
            f"(it has: {', '.join(compiled) or 'none'})",
        )
    try:
        import numpy as np

        model_bytes = _tiny_model_bytes()
    except Exception as exc:
        return EpCheck(provider, False, f"cannot build the test model: {exc}")
    providers: list[Any] = [(provider, options) if options else provider]
    if provider != "CPUExecutionProvider":
        providers.append("CPUExecutionProvider")
    try:
        with capture_output(f"probe onnxruntime {provider}") as capture:
            session_options = ort.SessionOptions()
            session_options.log_severity_level = 2
            session = ort.InferenceSession(
                model_bytes, sess_options=session_options, providers=providers
            )
            used = tuple(session.get_providers())
            if provider in used:
                session.run(None, {"x": np.ones(2, dtype=np.float32)})
    except Exception as exc:
        detail = first_line(strip_ansi(str(exc)))
        return EpCheck(provider, False, f"a test session with {provider} failed: {detail}")
    if provider not in used:
        said = relevant_log(capture.result)
        return EpCheck(
            provider,
            False,
            f"{provider} is listed by {flavour} {version} but a test session fell back to "
            f"{', '.join(used) or 'nothing'}"
            + (f"; onnxruntime said: {said}" if said else "")
            + ". Usually the CUDA/cuDNN (or TensorRT) libraries this build needs are "
            "missing or of another major version; see onnxruntime.ai/docs/execution-providers "
            "for the versions each release needs",
            used,
        )
    return EpCheck(provider, True, None, used)


def _tiny_model_bytes() -> bytes:
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "x"], ["y"])],
        "dlopt_probe",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    # IR 7 / opset 13 load in every ONNX Runtime this plugin supports.
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)
    return model.SerializeToString()


def first_line(text: str, limit: int = 400) -> str:
    """The first non-blank line of ``text``, cut at ``limit``."""
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), text.strip())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def relevant_log(output: CapturedOutput | None, limit: int = 500) -> str:
    """The lines of what ONNX Runtime printed (a capture's result) that explain a
    fallback."""
    keys = (
        "error",
        "fail",
        "cannot",
        "could not",
        "require",
        ".so",
        ".dll",
        "not in available",
        "falling back",
    )
    lines = [ln for ln in (output.lines() if output else ()) if any(k in ln.lower() for k in keys)]
    joined = " | ".join(lines)
    return joined if len(joined) <= limit else joined[: limit - 3] + "..."


#: How much of a provider library to read for the names it links: the dynamic string
#: table sits near the start, and the CUDA provider library is hundreds of MB.
_HEAD_BYTES = 16 * 2**20


def _linked_majors(library: Path, soname: str) -> list[int]:
    """Majors of ``soname`` (``libnvinfer.so``) that a shared library names (read, not
    loaded: loading is what fails when the library is missing)."""
    try:
        with library.open("rb") as file:
            data = file.read(_HEAD_BYTES)
    except OSError:
        return []
    pattern = re.escape(soname.encode()) + rb"\.(\d+)"
    return sorted({int(m.group(1)) for m in re.finditer(pattern, data)})


def _ort_capi_dir() -> Path | None:
    spec = importlib.util.find_spec("onnxruntime")
    locations = list(spec.submodule_search_locations or []) if spec else []
    return Path(locations[0]) / "capi" if locations else None


def tensorrt_ep_needs(capi: Path | None = None) -> tuple[int | None, int | None]:
    """``(TensorRT major, CUDA major)`` the installed ONNX Runtime's TensorRT EP links,
    read from its provider libraries; ``None`` where they do not say."""
    capi = capi if capi is not None else _ort_capi_dir()
    if capi is None:
        return None, None
    trt = _linked_majors(capi / "libonnxruntime_providers_tensorrt.so", "libnvinfer.so")
    cuda = _linked_majors(capi / "libonnxruntime_providers_cuda.so", "libcudart.so") or (
        _linked_majors(capi / "libonnxruntime_providers_cuda.so", "libcublas.so")
    )
    return (trt[-1] if trt else None), (cuda[-1] if cuda else None)


def tensorrt_ep_hint(capi: Path | None = None) -> str:
    """How to give this ONNX Runtime's TensorRT EP its libraries: the TensorRT major it
    links, from NVIDIA's index (PyPI's ``tensorrt-cuXX-libs`` is a stub that downloads
    from there), and why torch-tensorrt cannot share the environment."""
    trt, cuda = tensorrt_ep_needs(capi)
    if trt is None:
        return EP_INFO["TensorrtExecutionProvider"][1]
    package = f"tensorrt-cu{cuda}-libs" if cuda else "tensorrt-cuXX-libs"
    return (
        f'pip install "{package}=={trt}.*" --extra-index-url {NVIDIA_INDEX}, then add its '
        f"tensorrt_libs directory to LD_LIBRARY_PATH: this onnxruntime-gpu's TensorRT EP "
        f"links libnvinfer.so.{trt}. Not `pip install tensorrt` (the newest major). "
        "torch-tensorrt 2.13 needs TensorRT 11, so it and this EP need separate environments"
    )


#: Flags of x86 instructions that multiply u8 x s8 without saturating.
_VNNI_FLAGS = frozenset({"avx512_vnni", "avx_vnni", "amx_int8"})


def int8_saturates() -> bool:
    """Whether int8 weights need 7 bits here: x86 with AVX2 but no VNNI, where the
    u8 x s8 multiply of ONNX Runtime's int8 kernels saturates (measured relative L2
    error 7.5% -> 1.6% on an MLP with 7-bit weights). Unknown x86 flags count as such."""
    if platform.machine().lower() not in {"x86_64", "amd64", "i386", "i686", "x86"}:
        return False
    flags = cpu_flags()
    if flags is None:
        return True
    return "avx2" in flags and not flags & _VNNI_FLAGS
