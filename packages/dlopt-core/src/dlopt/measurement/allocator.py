"""The heap allocator's regime: detect buffers re-faulted on every call, and settle it.

glibc hands large freed buffers back to the system (``munmap``, or trimming the heap top)
until its dynamic thresholds adapt; until then an eager model faults its activation
memory back in on every call. A short race would measure that transient, slower than a
long-running server, and make every challenger look faster than it is. The race counts
minor page faults per call of the baseline's first calls, then fixes the thresholds with
``mallopt`` for the rest of the process (the regime a server reaches after many calls) and
records both, with advice for deployments that run in another process.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from typing import Protocol

try:  # POSIX only; page faults are simply not recorded elsewhere.
    import resource as _resource
except ImportError:  # pragma: no cover - Windows
    _resource = None  # type: ignore[assignment]

#: glibc's ``mallopt`` parameter numbers (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
#: The largest mmap threshold glibc accepts on 64-bit (``DEFAULT_MMAP_THRESHOLD_MAX``).
MMAP_THRESHOLD = 32 * 1024 * 1024
#: Keep up to 1 GiB of free heap top instead of trimming it after every call.
TRIM_THRESHOLD = 1024 * 1024 * 1024
#: Page faults per call above which the default regime is reported as costly (1 MiB of
#: 4 KiB pages re-faulted on every call).
COSTLY_FAULTS_PER_CALL = 256.0

ADVICE_ENV = f"MALLOC_MMAP_THRESHOLD_={MMAP_THRESHOLD} MALLOC_TRIM_THRESHOLD_={TRIM_THRESHOLD}"


def minor_faults() -> int | None:
    """Minor page faults of the whole process so far (``None`` where not available)."""
    if _resource is None:
        return None
    return int(_resource.getrusage(_resource.RUSAGE_SELF).ru_minflt)


class AllocatorControl(Protocol):
    """What the race needs of the allocator: settle it once, say how (``None``: cannot)."""

    def settle(self) -> str | None: ...


class GlibcAllocator:
    """Fixes glibc malloc's mmap and trim thresholds with ``mallopt`` (once per process)."""

    _settled: str | None = None

    def settle(self) -> str | None:
        if GlibcAllocator._settled is not None:
            return GlibcAllocator._settled
        libc = _libc()
        mallopt = getattr(libc, "mallopt", None) if libc is not None else None
        if mallopt is None:
            return None  # not glibc (musl has no mallopt)
        mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        mallopt.restype = ctypes.c_int
        if not (
            mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
            and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
        ):
            return None
        GlibcAllocator._settled = (
            f"mallopt(M_MMAP_THRESHOLD={MMAP_THRESHOLD}, M_TRIM_THRESHOLD={TRIM_THRESHOLD})"
        )
        return GlibcAllocator._settled


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        return ctypes.CDLL(name)
    except OSError:
        return None


def release_free_heap() -> bool:
    """Hand the heap's free memory back to the system (glibc ``malloc_trim(0)``).

    A settled allocator keeps freed memory resident; a peak-memory probe that starts on
    such a heap would see a region's allocations reuse it and report no growth. Returns
    whether it ran (``False`` without glibc).
    """
    libc = _libc()
    trim = getattr(libc, "malloc_trim", None) if libc is not None else None
    if trim is None:
        return False
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    trim(0)
    return True


def advice(plan: str, faults_before: float | None, settled: bool) -> str | None:
    """What a deployment should know when ``plan`` re-faulted its buffers on every call."""
    if faults_before is None or faults_before < COSTLY_FAULTS_PER_CALL:
        return None
    seen = (
        f"{plan} faulted {faults_before:.0f} pages per call under glibc's default malloc "
        "thresholds (its buffers went back to the system after every call)"
    )
    if settled:
        return (
            f"{seen}; the race measured every plan with fixed thresholds, as a long-running "
            f"server settles to. Serve from another process with {ADVICE_ENV} in its "
            "environment (or a pooling allocator such as jemalloc or tcmalloc) to get the "
            "measured speed from the first calls"
        )
    return (
        f"{seen}, and the race measured it so: a long-running server settles to a faster "
        "regime. Set MeasurementPolicy(settle_allocator=True), or serve with "
        f"{ADVICE_ENV} in the environment"
    )
