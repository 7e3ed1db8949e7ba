"""Facts about this machine's CPU that decide which plans can pay off.

A leaf module (it imports nothing from dlopt), so the built-in providers, runtime
provenance and the CLI can all read the same facts without importing each other.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Iterable
from contextlib import suppress
from functools import lru_cache

from attrs import frozen

#: /proc/cpuinfo flags that change which plans pay off on CPU.
CPU_FLAGS_OF_INTEREST = (
    "avx2",
    "avx512f",
    "avx512_vnni",
    "avx_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
)


@frozen
class CpuInfo:
    """The CPU model, its ISA flags of interest, and what torch makes of it."""

    model: str
    logical_cores: int
    torch_threads: int
    isa_flags: tuple[str, ...]
    torch_cpu_capability: str | None

    @property
    def fast_bf16(self) -> bool:
        """Native bf16 arithmetic (AVX-512 BF16 or AMX), where bf16 autocast can pay off."""
        return bool({"avx512_bf16", "amx_bf16"} & set(self.isa_flags))


@lru_cache(maxsize=1)
def _proc_cpuinfo() -> tuple[str | None, frozenset[str] | None]:
    """The first CPU's model name and feature flags from ``/proc/cpuinfo`` (read once);
    ``None`` for what could not be read (not Linux)."""
    model: str | None = None
    flags: frozenset[str] | None = None
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and value.strip() and model is None:
                    model = value.strip()
                elif key == "flags" and flags is None:
                    flags = frozenset(value.split())
    except OSError:
        pass
    return model, flags


def cpu_flags() -> frozenset[str] | None:
    """Every feature flag of this CPU (``/proc/cpuinfo``); ``None`` where unreadable."""
    return _proc_cpuinfo()[1]


def cpu_model_and_flags() -> tuple[str, tuple[str, ...]]:
    """The CPU model name and its :data:`CPU_FLAGS_OF_INTEREST` (read once per process)."""
    model, flags = _proc_cpuinfo()
    model = model or platform.processor() or platform.machine()
    return model, tuple(f for f in CPU_FLAGS_OF_INTEREST if f in (flags or ()))


def cpu_info() -> CpuInfo:
    """This CPU as torch runs on it now (thread count and kernel capability included)."""
    import torch

    model, flags = cpu_model_and_flags()
    try:
        capability = torch.backends.cpu.get_cpu_capability()
    except AttributeError:  # older torch
        capability = None
    return CpuInfo(
        model=model,
        logical_cores=os.cpu_count() or 1,
        torch_threads=torch.get_num_threads(),
        isa_flags=flags,
        torch_cpu_capability=capability,
    )


def load_average() -> float | None:
    """The 1-minute load average: how many threads were running or waiting for a CPU,
    averaged (``None`` where the system does not say)."""
    try:
        return float(os.getloadavg()[0])
    except (AttributeError, OSError):
        return None


@frozen
class CpuSample:
    """CPU time spent so far: by every process on the machine (``None``: the system does
    not say), by this process and its waited-for children, and when it was read."""

    machine_busy_s: float | None
    own_s: float
    at_s: float


def cpu_sample() -> CpuSample:
    """The CPU time spent so far (read two samples, and :func:`others_cpus` says how many
    CPUs' worth of work other processes did between them)."""
    import resource
    import time

    own = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        own += usage.ru_utime + usage.ru_stime
    return CpuSample(_machine_busy_s(), own, time.monotonic())


def _machine_busy_s() -> float | None:
    """Seconds every CPU of the machine spent on work since boot (Linux's /proc/stat:
    everything but idle and I/O wait), or ``None``."""
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            fields = stat.readline().split()
        ticks = [int(value) for value in fields[1:]]
        idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
        # guest time is already counted in user time
        return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def others_cpus(start: CpuSample, end: CpuSample) -> float | None:
    """How many CPUs' worth of work other processes did between ``start`` and ``end`` (the
    machine's busy time less this process's, over the wall time; ``None``: unknown)."""
    wall = end.at_s - start.at_s
    if start.machine_busy_s is None or end.machine_busy_s is None or wall <= 0:
        return None
    others = (end.machine_busy_s - start.machine_busy_s) - (end.own_s - start.own_s)
    return max(others, 0.0) / wall


def usable_cpus() -> int:
    """How many CPUs this process may run on (its affinity where the system has one)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def machine_class(device: str = "cpu") -> str:
    """The capability class of the machine plans run on that decides which plans pay off.
    On a CPU: ``amx``, ``avx512_bf16`` (native bf16 and VNNI), ``avx512_vnni`` (int8 dot
    products, no bf16), ``avx2`` (neither); on a CUDA device: ``cuda_sm<major><minor>``
    (its compute capability). The priors of the plans are keyed by it."""
    if device.startswith("cuda"):
        import torch

        with suppress(Exception):
            major, minor = torch.cuda.get_device_capability(torch.device(device))
            return f"cuda_sm{major}{minor}"
        return "cuda"
    _, flags = cpu_model_and_flags()
    return machine_class_of(flags)


def machine_class_of(flags: Iterable[str]) -> str:
    """The CPU class :func:`machine_class` names for a CPU with ``flags``."""
    found = set(flags)
    if found & {"amx_bf16", "amx_int8"}:
        return "amx"
    if "avx512_bf16" in found:
        return "avx512_bf16"
    if found & {"avx512_vnni", "avx_vnni"}:
        return "avx512_vnni"
    return "avx2"


@lru_cache(maxsize=1)
def environment_fingerprint() -> str:
    """A SHA-256 of what can change a provider's probe without dlopt knowing: the Python
    environment (its location: two virtualenvs with the same versions are two
    environments, and a probe's answer can name files inside one) and platform, every
    installed distribution and its version, the CPU's flags, and the accelerator devices
    and driver the system shows. Computed once per process."""
    import hashlib
    import sys

    # The installed distributions, by their metadata folders' names (name and version:
    # "torch-2.13.0.dist-info"): listing the import path's folders is cheap, reading every
    # distribution's metadata is not.
    distributions = []
    for entry in sys.path:
        with suppress(OSError):
            distributions += sorted(
                name
                for name in os.listdir(entry or ".")
                if name.endswith((".dist-info", ".egg-info"))
            )
    devices = []
    for folder in ("/dev/dri", "/dev/accel"):
        with suppress(OSError):
            devices += sorted(f"{folder}/{name}" for name in os.listdir(folder))
    driver = ""
    with suppress(OSError), open("/proc/driver/nvidia/version", encoding="utf-8") as handle:
        driver = handle.readline().strip()
    parts = [
        sys.prefix,
        platform.python_version(),
        platform.platform(),
        *distributions,
        *sorted(cpu_flags() or ()),
        *devices,
        driver,
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()
