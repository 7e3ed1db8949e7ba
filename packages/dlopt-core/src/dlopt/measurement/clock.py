"""Clocks (injectable, so the statistics are tested with a fake one) and ``time_call``."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol, runtime_checkable


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
    check that the kernel times too-short calls in blocks.
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


def time_call(
    fn: Callable[[], object],
    clock: Clock | None = None,
    synchronize: Callable[[], None] | None = None,
) -> float:
    """Seconds one call of ``fn`` takes, device work included.

    With ``synchronize`` (e.g. ``torch.cuda.synchronize``), queued device work is drained
    before the clock starts and the call's own asynchronous work is waited for before it
    stops. Used by the pipeline for the setup (build) and first-call costs.
    """
    clock = clock if clock is not None else MonotonicClock()
    if synchronize is not None:
        synchronize()
    start = clock.now_ns()
    fn()
    if synchronize is not None:
        synchronize()
    return (clock.now_ns() - start) / 1e9
