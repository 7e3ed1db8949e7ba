"""Peak memory of a region of code: CUDA allocator peak, or the process's resident peak.

Every figure says how it was measured (``method``) and what it can and cannot see
(``note``); where nothing trustworthy can be measured, ``mb`` is ``None`` and ``note``
says why. Never a made-up number.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from typing import Any

from attrs import frozen

from dlopt.measurement.allocator import release_free_heap
from dlopt.platform.serialization import finite_or_none

_MB = 1024.0 * 1024.0

CPU_NOTE = (
    "growth of this process's resident set (all threads) between the start of the region "
    "and its peak: includes pages newly made resident by the region (allocations, runtime "
    "arenas such as ONNX Runtime's or oneDNN's, newly loaded libraries); excludes memory that "
    "was already resident before (reused allocator caches, weights shared with the eager "
    "model), memory swapped out, memory of other processes (compile workers) and GPU memory"
)
CUDA_NOTE = (
    "peak bytes allocated through PyTorch's CUDA caching allocator above what was allocated at "
    "the start of the region; excludes the CUDA context, memory the caching allocator reserved "
    "but did not hand out, and memory runtimes allocate outside PyTorch (e.g. a TensorRT engine's "
    "own workspace)"
)


@frozen
class PeakMemory:
    """Peak memory growth of a region in MiB (``None`` when it could not be measured)."""

    mb: float | None
    method: str
    note: str
    #: CUDA only: growth of the memory in use on the whole device (``torch.cuda.mem_get_info``)
    #: between the start and the end of the region. It sees what PyTorch's allocator does
    #: not (ONNX Runtime's and TensorRT's arenas, cuBLAS workspaces), but also any other
    #: process on the GPU, and only what is still held at the end (not a peak).
    device_wide_mb: float | None = None


# Resetting the process high-water mark is process-wide: a probe started inside another
# would erase the outer one's peak. The generation counter lets the outer probe notice.
_lock = threading.Lock()
_generation = 0


def _proc_status_kb(key: str) -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _reset_hwm() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0: write "5" to clear_refs)."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as handle:
            handle.write("5")
    except OSError:
        return False
    hwm, rss = _proc_status_kb("VmHWM"), _proc_status_kb("VmRSS")
    # Some kernels accept the write but ignore it; check that it actually took.
    return hwm is not None and rss is not None and hwm <= rss + 64


def _maxrss_kb() -> int | None:
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows
        return None
    value = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return value // 1024 if sys.platform == "darwin" else value  # macOS reports bytes


class MemoryProbe:
    """Measures peak memory growth between ``start()`` and ``stop()``.

    ``device`` is ``"cpu"`` or a CUDA device (``"cuda"``, ``"cuda:1"``). Use
    ``track_peak_memory`` for the context-manager form.
    """

    def __init__(self, device: str = "cpu") -> None:
        self.device = str(device)
        self.result: PeakMemory | None = None
        self._state: dict[str, object] = {}

    def start(self) -> MemoryProbe:
        global _generation
        if self.device.startswith("cuda"):
            self._start_cuda()
            return self
        with _lock:
            _generation += 1
            # Freed memory the heap keeps resident would be reused by the region unseen.
            trimmed = release_free_heap()
            self._state = {
                "trimmed": trimmed,
                "generation": _generation,
                "rss_kb": _proc_status_kb("VmRSS"),
                "reset": _reset_hwm(),
                "maxrss_kb": _maxrss_kb(),
            }
        return self

    def stop(self) -> PeakMemory:
        if self.device.startswith("cuda"):
            self.result = self._stop_cuda()
        else:
            self.result = self._stop_cpu()
        return self.result

    # -- CPU ---------------------------------------------------------------------------
    def _stop_cpu(self) -> PeakMemory:
        st = self._state
        rss0 = st.get("rss_kb")
        if st.get("generation") != _generation:
            return PeakMemory(
                None,
                "none",
                "another peak-memory probe started inside this region and reset the process "
                "high-water mark; measure regions one at a time",
            )
        if st.get("reset") and isinstance(rss0, int):
            hwm = _proc_status_kb("VmHWM")
            if hwm is not None:
                return PeakMemory(
                    finite_or_none(max(0, hwm - rss0) / 1024.0),
                    "linux VmHWM after reset via /proc/self/clear_refs, minus VmRSS at start"
                    + (" (free heap released with malloc_trim first)" if st.get("trimmed") else ""),
                    CPU_NOTE,
                )
        maxrss0, maxrss1 = st.get("maxrss_kb"), _maxrss_kb()
        if isinstance(maxrss0, int) and isinstance(maxrss1, int) and isinstance(rss0, int):
            if maxrss1 > maxrss0:
                # The lifetime peak rose inside the region, so the region's peak is maxrss1.
                return PeakMemory(
                    finite_or_none(max(0, maxrss1 - rss0) / 1024.0),
                    "getrusage ru_maxrss (rose inside the region), minus VmRSS at start",
                    CPU_NOTE,
                )
            return PeakMemory(
                None,
                "none",
                "the region stayed below the process's earlier resident peak and the peak could "
                "not be reset (/proc/self/clear_refs unavailable), so its own peak is unknown",
            )
        return PeakMemory(
            None,
            "none",
            f"resident-set peak is not readable on this platform ({sys.platform}, pid {os.getpid()})",
        )

    # -- CUDA --------------------------------------------------------------------------
    def _start_cuda(self) -> None:
        try:
            import torch

            if not torch.cuda.is_available():
                self._state = {
                    "error": "CUDA is not available (torch.cuda.is_available() is False)"
                }
                return
            dev = torch.device(self.device)
            torch.cuda.synchronize(dev)
            torch.cuda.reset_peak_memory_stats(dev)
            self._state = {
                "device": dev,
                "base": torch.cuda.memory_allocated(dev),
                "free": _cuda_free_bytes(torch, dev),
            }
        except Exception as exc:  # a broken CUDA setup is reported, not raised
            self._state = {
                "error": f"could not read CUDA memory stats: {type(exc).__name__}: {exc}"
            }

    def _stop_cuda(self) -> PeakMemory:
        if "error" in self._state:
            return PeakMemory(None, "none", str(self._state["error"]))
        try:
            import torch

            dev = self._state["device"]
            torch.cuda.synchronize(dev)  # type: ignore[arg-type]
            peak = torch.cuda.max_memory_allocated(dev)  # type: ignore[arg-type]
            base = int(self._state["base"])  # type: ignore[call-overload]
            free_before, free_after = self._state["free"], _cuda_free_bytes(torch, dev)
        except Exception as exc:
            return PeakMemory(
                None, "none", f"could not read CUDA memory stats: {type(exc).__name__}: {exc}"
            )
        device_wide = (
            finite_or_none(max(0, free_before - free_after) / _MB)  # type: ignore[operator]
            if free_before is not None and free_after is not None
            else None
        )
        return PeakMemory(
            finite_or_none(max(0, peak - base) / _MB),
            "torch.cuda.max_memory_allocated after reset_peak_memory_stats, minus memory_allocated at start",
            CUDA_NOTE,
            device_wide,
        )


def _cuda_free_bytes(torch: Any, device: Any) -> int | None:
    """Free bytes on the whole device (``None`` where the driver cannot say)."""
    try:
        free, _total = torch.cuda.mem_get_info(device)
    except Exception:
        return None
    return int(free)


@contextlib.contextmanager
def track_peak_memory(device: str = "cpu") -> Iterator[MemoryProbe]:
    """Context manager: ``with track_peak_memory("cpu") as probe: ...``; then ``probe.result``.

    The result is a ``PeakMemory`` (set on exit, also when the block raises).
    """
    probe = MemoryProbe(device).start()
    try:
        yield probe
    finally:
        probe.stop()
