"""Runtime provenance: what machine, software and capabilities a decision was made on."""

from __future__ import annotations

import platform
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING

import attrs
from attrs import field, frozen

from dlopt.errors import ConfigurationError
from dlopt.platform.machine import CpuInfo, cpu_info
from dlopt.settings.target import ExecutionTarget

if TYPE_CHECKING:
    from dlopt.contract.records import PluginFailure
    from dlopt.pipeline.probe import ProbeRecord

__all__ = [
    "CpuInfo",
    "CudaDeviceInfo",
    "ProviderAvailabilityRecord",
    "RuntimeInfo",
    "cpu_info",
    "inspect_runtime",
    "record_providers",
]


@frozen
class CudaDeviceInfo:
    name: str
    compute_capability: str
    total_memory_mb: float


@frozen
class ProviderAvailabilityRecord:
    """A provider's availability as seen when the record was taken."""

    name: str
    distribution: str | None
    version: str | None
    available: bool
    reason: str | None
    install_hint: str | None
    sdk_versions: dict[str, str | None] = field(factory=dict)


@frozen
class RuntimeInfo:
    """A frozen record of the runtime; round-trips through ``dlopt.platform.serialization``."""

    device: str
    device_type: str
    device_name: str
    python: str
    platform: str
    torch: str
    cuda: str | None
    cudnn: str | None
    cpu: CpuInfo
    cuda_device: CudaDeviceInfo | None
    amp: bool
    amp_dtypes: tuple[str, ...]
    channels_last: bool
    triton: str | None
    torch_compile: bool
    torch_compile_reason: str | None
    providers: tuple[ProviderAvailabilityRecord, ...] = ()
    plugin_failures: tuple[str, ...] = ()


def inspect_runtime(
    device: str | ExecutionTarget = "cpu", *, with_providers: bool = True
) -> RuntimeInfo:
    """Describe the runtime for ``device``: versions, device, ISA, capabilities, providers."""
    import torch

    from dlopt.platform.probing import cuda_bf16_native, distribution_version, find_cxx_compiler

    target = device if isinstance(device, ExecutionTarget) else ExecutionTarget(device)
    cpu = cpu_info()
    cuda_device = None
    device_name = cpu.model
    amp_dtypes: tuple[str, ...] = ()
    if target.is_cuda:
        if not torch.cuda.is_available():
            raise ConfigurationError(
                f"device {target.device!r} requested but torch {torch.__version__} sees no CUDA "
                "device; use --device cpu or install a CUDA build of torch"
            )
        index = torch.device(target.device).index or 0
        props = torch.cuda.get_device_properties(index)
        cuda_device = CudaDeviceInfo(
            name=props.name,
            compute_capability=f"{props.major}.{props.minor}",
            total_memory_mb=props.total_memory / 2**20,
        )
        device_name = props.name
        amp_dtypes = ("float16", "bfloat16") if cuda_bf16_native(index) else ("float16",)
    elif target.device_type == "cpu":
        amp_dtypes = ("bfloat16",) + (("float16",) if "avx512_fp16" in cpu.isa_flags else ())

    triton = distribution_version("triton") or distribution_version("pytorch-triton")
    if target.device_type == "cpu":
        compiler, version_line = find_cxx_compiler()
        compile_ok = compiler is not None
        compile_reason = (
            f"Inductor C++ backend: {version_line}"
            if compile_ok
            else "no C++ compiler found (install g++)"
        )
    elif target.is_cuda:
        compile_ok = triton is not None
        compile_reason = "Inductor Triton backend" if compile_ok else "Triton is not installed"
    else:
        compile_ok, compile_reason = False, f"no Inductor backend checked for {target.device_type}"

    info = RuntimeInfo(
        device=target.device,
        device_type=target.device_type,
        device_name=device_name,
        python=sys.version.split()[0],
        platform=platform.platform(),
        torch=torch.__version__,
        cuda=torch.version.cuda,
        cudnn=str(torch.backends.cudnn.version()) if torch.backends.cudnn.is_available() else None,
        cpu=cpu,
        cuda_device=cuda_device,
        amp=bool(amp_dtypes),
        amp_dtypes=amp_dtypes,
        channels_last=target.device_type in {"cpu", "cuda"},
        triton=triton,
        torch_compile=compile_ok,
        torch_compile_reason=compile_reason,
    )
    if not with_providers:
        return info
    from dlopt.contract.provider import ProviderContext
    from dlopt.pipeline.probe import probe_all
    from dlopt.plugins.discovery import load_providers

    registry = load_providers()
    return record_providers(
        info, probe_all(registry, ProviderContext(target=target)), registry.failures
    )


def record_providers(
    info: RuntimeInfo, statuses: Iterable[ProbeRecord], failures: Iterable[PluginFailure]
) -> RuntimeInfo:
    """``info`` with the providers' availability and the plugins that failed to load."""
    return attrs.evolve(
        info,
        providers=tuple(
            ProviderAvailabilityRecord(
                s.name,
                s.distribution,
                s.version,
                s.availability.available,
                s.availability.reason,
                s.availability.install_hint,
                dict(s.availability.sdk_versions),
            )
            for s in statuses
        ),
        plugin_failures=tuple(f"{f.plugin} ({f.stage}): {f.error}" for f in failures),
    )
