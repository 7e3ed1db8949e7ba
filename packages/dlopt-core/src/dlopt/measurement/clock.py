"""Clocks and CPU-time sources (injectable, so the race engine is tested with fakes), ``time_call``."""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable
from typing import Protocol, TypeVar, runtime_checkable


@runtime_checkable
class Clock(Protocol):
    """A monotonic clock in integer nanoseconds."""

    @property
    def resolution_ns(self) -> int:
        """The smallest difference between two readings this clock can show."""
        ...

    def now_ns(self) -> int:
        """The current reading, in nanoseconds since an arbitrary origin."""
        ...


T = TypeVar("T")


class MonotonicClock:
    """The process's monotonic high-resolution clock (``time.perf_counter_ns``)."""

    def __init__(self) -> None:
        info = time.get_clock_info("perf_counter")
        # Never claim better than 1 ns: that is the unit of the readings.
        self._resolution_ns = max(1, round(info.resolution * 1e9))

    @property
    def resolution_ns(self) -> int:
        return self._resolution_ns

    def now_ns(self) -> int:
        return time.perf_counter_ns()

    def __repr__(self) -> str:
        return f"MonotonicClock(resolution_ns={self._resolution_ns})"


class FakeClock:
    """A clock that only moves when told to: ``advance(seconds)``.

    Readings are quantised to ``resolution_ns`` like a coarse hardware timer, so tests can
    check that the race engine times too-short calls in blocks.
    """

    def __init__(self, start_ns: int = 0, resolution_ns: int = 1) -> None:
        if resolution_ns < 1:
            raise ValueError(f"resolution_ns must be >= 1, got {resolution_ns}")
        self._t = float(start_ns)
        self._resolution_ns = int(resolution_ns)

    @property
    def resolution_ns(self) -> int:
        return self._resolution_ns

    @property
    def elapsed_s(self) -> float:
        """Exact (unquantised) simulated time, in seconds."""
        return self._t / 1e9

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("a clock cannot go backwards")
        self._t += seconds * 1e9

    def now_ns(self) -> int:
        r = self._resolution_ns
        return int(self._t // r) * r


@runtime_checkable
class CpuTimeSource(Protocol):
    """CPU time used by every thread of this process, and a way to let time pass idle.

    The race's quiet-wait (``MeasurementPolicy.quiesce_max_s``) sleeps in short windows
    and reads ``cpu_ns`` around each: CPU used while the measuring thread sleeps belongs to
    worker threads still running after a call (spinning thread pools).
    """

    def cpu_ns(self) -> int:
        """CPU time of the process's threads so far, in nanoseconds; never decreases."""
        ...

    def sleep(self, seconds: float) -> None:
        """Let ``seconds`` pass on the race's clock without running anything."""
        ...


# Linux encodes another thread's CPU clock as MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED).
_CPUCLOCK_PERTHREAD_SCHED = 4 | 2


class ProcessCpuTime:
    """This process's CPU time, all threads, for the real clock.

    On Linux it sums each thread's own CPU clock (``/proc/self/task`` and
    ``clock_gettime`` on the thread's clock id). The process-wide clock
    (``time.process_time``) is not used there: it adds up other threads' time only at
    scheduler ticks (every 4 ms here), so a 2 ms window saw a spinning thread as 0% or
    175% of a core, alternately; per-thread clocks are exact. Elsewhere (or if the
    per-thread clocks cannot be read) it falls back to ``time.process_time_ns``; use a
    window of several ticks there.

    Threads that exit lose their last interval's time; the total never decreases.
    """

    def __init__(self) -> None:
        self._per_thread = sys.platform.startswith("linux") and os.path.isdir("/proc/self/task")
        self._last: dict[int, int] = {}
        self._total = 0
        if self._per_thread:
            try:
                self._last = self._read_threads()
            except OSError:
                self._per_thread = False

    @staticmethod
    def _read_threads() -> dict[int, int]:
        out: dict[int, int] = {}
        for entry in os.listdir("/proc/self/task"):
            tid = int(entry)
            try:
                out[tid] = time.clock_gettime_ns((~tid << 3) | _CPUCLOCK_PERTHREAD_SCHED)
            except OSError:  # the thread exited since the listing
                continue
        return out

    @property
    def per_thread(self) -> bool:
        """Whether exact per-thread clocks are read (else the tick-granular process clock)."""
        return self._per_thread

    def cpu_ns(self) -> int:
        if not self._per_thread:
            return time.process_time_ns()
        now = self._read_threads()
        # Per-thread deltas: a thread that exited must not make the total go backwards.
        for tid, ns in now.items():
            self._total += max(0, ns - self._last.get(tid, 0))
        self._last = now
        return self._total

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def __repr__(self) -> str:
        return f"ProcessCpuTime(per_thread={self._per_thread})"


class FakeCpuTime:
    """CPU time of simulated background threads, on a ``FakeClock``.

    ``spin(seconds, cores)`` makes background threads use ``cores`` cores for the next
    ``seconds`` of the clock (whatever advances it: a plan's call or the quiet-wait's
    ``sleep``, which advances the clock). Nothing else uses CPU here, so the quiet-wait
    on an idle fake process costs exactly one window.
    """

    def __init__(self, clock: FakeClock) -> None:
        self._clock = clock
        self._cpu_s = 0.0
        self._seen_s = clock.elapsed_s
        self._until_s = -math.inf
        self._cores = 0.0
        self.sleeps = 0

    def _accrue(self) -> None:
        now = self._clock.elapsed_s
        busy = max(0.0, min(now, self._until_s) - self._seen_s)
        self._cpu_s += busy * self._cores
        self._seen_s = now

    def spin(self, seconds: float, cores: float = 1.0) -> None:
        """Background threads use ``cores`` cores for the next ``seconds`` (replaces any spin)."""
        self._accrue()
        self._until_s = self._clock.elapsed_s + seconds
        self._cores = cores

    @property
    def spinning(self) -> bool:
        """Whether background threads are busy now."""
        return self._clock.elapsed_s < self._until_s

    def cpu_ns(self) -> int:
        self._accrue()
        return round(self._cpu_s * 1e9)

    def sleep(self, seconds: float) -> None:
        self.sleeps += 1
        self._clock.advance(seconds)


def time_call(
    fn: Callable[[], T],
    clock: Clock | None = None,
    synchronize: Callable[[], None] | None = None,
) -> tuple[float, T]:
    """``(seconds, result)`` of one call of ``fn``, device work included.

    With ``synchronize`` (e.g. ``torch.cuda.synchronize``, or a plan's own), queued device
    work is drained before the clock starts and the call's own asynchronous work is
    waited for before it stops. Used by the pipeline for the setup (build) and first-call
    costs.
    """
    clock = clock if clock is not None else MonotonicClock()
    if synchronize is not None:
        synchronize()
    start = clock.now_ns()
    result = fn()
    if synchronize is not None:
        synchronize()
    return (clock.now_ns() - start) / 1e9, result
