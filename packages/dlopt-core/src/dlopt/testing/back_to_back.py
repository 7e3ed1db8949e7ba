"""The fixed protocol peer tools use, for comparison: back-to-back timing, marginal intervals.

Each candidate in turn: ``warmup`` untimed calls, then ``repeats`` x ``iterations`` timed
calls per case, all of one candidate before the next. Each candidate's traffic-weighted
mean gets a marginal t-interval; a challenger is called faster when the ratio of the
interval ends (baseline low / challenger high) clears ``min_speedup``. This is what
``benchmarks/measurement_kernel.py`` compares the race against; dlopt itself never uses it
to decide.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np
from attrs import frozen

from dlopt.measurement.clock import Clock, MonotonicClock
from dlopt.measurement.stats import t_interval


@frozen
class BackToBackResult:
    """Per candidate: weighted mean (ms) with its marginal interval, speedup and verdict."""

    timed_calls: int
    untimed_calls: int
    total_time_s: float
    mean_ms: dict[str, float]
    low_ms: dict[str, float]
    high_ms: dict[str, float]
    speedup: dict[str, float]
    speedup_low: dict[str, float]
    speedup_high: dict[str, float]
    verdict: dict[str, str]


def back_to_back_protocol(
    candidates: Mapping[str, Sequence[Callable[[], object]]],
    weights: Sequence[float],
    baseline: str,
    min_speedup: float,
    *,
    warmup: int = 5,
    iterations: int = 20,
    repeats: int = 3,
    confidence: float = 0.95,
    clock: Clock | None = None,
    synchronize: Callable[[], None] | None = None,
) -> BackToBackResult:
    """Time every candidate back to back (in mapping order) and compare marginal intervals."""
    clock = clock if clock is not None else MonotonicClock()
    total_w = float(sum(weights))
    ws = [w / total_w for w in weights]
    start = clock.now_ns()
    timed = untimed = 0
    mean: dict[str, float] = {}
    low: dict[str, float] = {}
    high: dict[str, float] = {}
    for name, fns in candidates.items():
        m = 0.0
        var_half = 0.0
        for w, fn in zip(ws, fns):
            for _ in range(warmup):
                fn()
            if synchronize is not None:
                synchronize()
            untimed += warmup
            samples = []
            for _ in range(repeats * iterations):
                t0 = clock.now_ns()
                fn()
                if synchronize is not None:
                    synchronize()
                samples.append((clock.now_ns() - t0) / 1e6)
            timed += repeats * iterations
            iv = t_interval(samples, 1.0 - confidence)
            mu = float(np.mean(samples))
            half = 0.0 if iv is None else (iv[2] - iv[1]) / 2.0
            m += w * mu
            var_half += (w * half) ** 2
        mean[name] = m
        half_w = math.sqrt(var_half)
        low[name], high[name] = m - half_w, m + half_w
    b = baseline
    speedup, s_low, s_high, verdict = {}, {}, {}, {}
    for name in candidates:
        speedup[name] = mean[b] / mean[name] if mean[name] > 0 else math.inf
        s_low[name] = low[b] / high[name] if high[name] > 0 else math.inf
        s_high[name] = high[b] / low[name] if low[name] > 0 else math.inf
        if name == b:
            verdict[name] = "baseline"
        elif s_low[name] >= min_speedup:
            verdict[name] = "faster"
        elif s_high[name] < min_speedup:
            verdict[name] = "not_faster"
        else:
            verdict[name] = "unresolved"
    return BackToBackResult(
        timed_calls=timed,
        untimed_calls=untimed,
        total_time_s=(clock.now_ns() - start) / 1e9,
        mean_ms=mean,
        low_ms=low,
        high_ms=high,
        speedup=speedup,
        speedup_low=s_low,
        speedup_high=s_high,
        verdict=verdict,
    )
