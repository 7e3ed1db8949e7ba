"""``LatencyHistogram``: served latencies as a streaming estimate, cheap on every call.

Buckets are spaced geometrically (each 4% wider than the last, from 1 microsecond to
1000 seconds), so a quantile read from them is within about 2% of the true one however
long the process serves; the boundaries of :data:`EXPORTED_BUCKETS_S` are bucket edges
too, so the Prometheus histogram (:mod:`dlopt.serving.metrics`) reads exact cumulative
counts. Recording a call is one ``bisect`` and two additions; callers hold their own lock.
"""

from __future__ import annotations

import bisect
import math

#: The Prometheus histogram's upper bounds, in seconds (its ``le`` labels).
EXPORTED_BUCKETS_S: tuple[float, ...] = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
_RATIO = 1.04
_LOWEST_S = 1e-6
_HIGHEST_S = 1e3


def _edges() -> tuple[float, ...]:
    count = math.ceil(math.log(_HIGHEST_S / _LOWEST_S) / math.log(_RATIO))
    spaced = {_LOWEST_S * _RATIO**i for i in range(count + 1)}
    return tuple(sorted(spaced | set(EXPORTED_BUCKETS_S)))


#: Upper bounds of every bucket but the last (which takes anything longer).
EDGES_S: tuple[float, ...] = _edges()


class LatencyHistogram:
    """Counts of served latencies per bucket (see the module docstring); not locked."""

    __slots__ = ("count", "counts", "total_s")

    def __init__(self) -> None:
        self.counts = [0] * (len(EDGES_S) + 1)
        self.count = 0
        self.total_s = 0.0

    def record(self, seconds: float) -> None:
        """Add one call that took ``seconds``."""
        self.counts[bisect.bisect_left(EDGES_S, seconds)] += 1
        self.count += 1
        self.total_s += seconds

    def quantile(self, q: float) -> float | None:
        """The ``q`` quantile in seconds (``None`` before the first call): the geometric
        middle of the bucket holding it."""
        if self.count == 0:
            return None
        rank = q * (self.count - 1)
        seen = 0
        for index, n in enumerate(self.counts):
            seen += n
            if seen > rank:
                low = EDGES_S[index - 1] if index > 0 else EDGES_S[0] / _RATIO
                high = EDGES_S[index] if index < len(EDGES_S) else EDGES_S[-1] * _RATIO
                return math.sqrt(low * high)
        return EDGES_S[-1]

    def cumulative(self, bounds: tuple[float, ...] = EXPORTED_BUCKETS_S) -> list[int]:
        """How many calls took at most each of ``bounds`` (each a bucket edge)."""
        totals = []
        running = 0
        index = 0
        for bound in bounds:
            stop = bisect.bisect_left(EDGES_S, bound)
            while index <= stop:
                running += self.counts[index]
                index += 1
            totals.append(running)
        return totals


#: Calls per window of :class:`RecentLatency`: its estimates cover the last 1000 to 2000.
RECENT_WINDOW = 1000


class RecentLatency:
    """The latency of the most recent calls: two windows of :data:`RECENT_WINDOW` calls,
    the older dropped when the newer fills, so a plan that turns slow after a million
    fast calls shows it within a window. Not locked (callers hold their own lock)."""

    __slots__ = ("current", "previous", "window")

    def __init__(self, window: int = RECENT_WINDOW) -> None:
        self.window = window
        self.current = LatencyHistogram()
        self.previous: LatencyHistogram | None = None

    def record(self, seconds: float) -> None:
        """Add one call that took ``seconds``."""
        if self.current.count >= self.window:
            self.previous, self.current = self.current, LatencyHistogram()
        self.current.record(seconds)

    @property
    def count(self) -> int:
        """Calls the estimates cover."""
        return self.current.count + (self.previous.count if self.previous else 0)

    def quantile(self, q: float) -> float | None:
        """The ``q`` quantile of the recent calls, in seconds (``None``: no calls)."""
        if self.previous is None:
            return self.current.quantile(q)
        merged = LatencyHistogram()
        merged.counts = [a + b for a, b in zip(self.current.counts, self.previous.counts)]
        merged.count = self.count
        return merged.quantile(q)
