"""Statistics of the race engine: latency summaries and descriptive intervals.

The intervals that decide come from :mod:`dlopt.measurement.sequential` (a group-sequential
boundary); this module holds the per-case latency summary, the Student-t helpers and the
*descriptive* fixed-sample bootstrap interval reported as ``speedup_fixed_sample``
(tighter, but not valid after sequential stopping). docs/measurement.md explains both.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from attrs import frozen

from dlopt.measurement import distributions
from dlopt.platform.serialization import finite_or_none


@frozen
class LatencyStats:
    """Steady-state latency of one plan on one workload case (milliseconds per request).

    ``samples`` are per-request latencies, except that a call too short for the timer is
    timed in blocks of ``block_size`` back-to-back calls and each sample is the block's
    mean per call. ``mean_low_ms``/``mean_high_ms`` is a t-interval of the mean over the
    ``rounds`` burst means (rounds are the independent replicates; calls within a burst are
    not), at ``confidence``. ``noisy`` is set when that interval's half-width exceeds the
    policy's ``noise_threshold`` of the mean. ``page_faults_per_call`` counts minor page
    faults of the whole process around timed calls (``None`` where not recorded).
    """

    case: str
    median_ms: float | None
    mean_ms: float | None
    min_ms: float | None
    p90_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    stdev_ms: float | None
    samples: int
    block_size: int
    rounds: int
    mean_low_ms: float | None
    mean_high_ms: float | None
    confidence: float
    page_faults_per_call: float | None
    noisy: bool
    warmup_calls: int
    warmup_converged: bool
    timed_calls: int
    untimed_calls: int
    burst_calls: int = 0
    round_spread: float | None = None
    #: Every timed sample in the order taken (ms per call; block means for blocked calls).
    samples_ms: tuple[float, ...] | None = None


@frozen
class RatioInterval:
    """A speedup (baseline cost / candidate cost; > 1 means the candidate is faster).

    ``low``/``high`` bound it at ``confidence``. ``method`` says how; for the decision
    interval ``per_look_confidence`` is the level of the single t-interval behind it (the
    alpha-spending share of this look), ``rounds`` the number of paired rounds used.
    """

    point: float | None
    low: float | None
    high: float | None
    confidence: float
    method: str
    rounds: int
    per_look_confidence: float | None = None

    def describe(self) -> str:
        """``1.234x [1.100, 1.380]`` (``no interval`` when there is no point estimate;
        ``1.234x [not measured (1 round)]`` when the interval is too thin to print,
        :func:`not_measured`)."""
        if self.point is None:
            return "no interval"
        thin = not_measured(self)
        if thin is not None:
            return f"{self.point:.3f}x [{thin}]"
        low = f"{self.low:.3f}" if self.low is not None else "?"
        high = f"{self.high:.3f}" if self.high is not None else "?"
        return f"{self.point:.3f}x [{low}, {high}]"


#: The fewest paired rounds whose interval is printed: one round has no spread to bound.
MIN_PRINTED_ROUNDS = 2
#: An upper bound past this is printed as not measured: no plan is a million times faster,
#: so such a bound is the t-quantile of too few rounds, or a timing of about nothing.
MAX_PRINTED_BOUND = 1e6


def not_measured(interval: RatioInterval) -> str | None:
    """``"not measured (1 round)"`` when ``interval`` (one with a point) is too thin to
    print: from fewer than :data:`MIN_PRINTED_ROUNDS` rounds, or with an upper bound that
    is missing or past :data:`MAX_PRINTED_BOUND` (then ``"not measured (8 rounds,
    unbounded)"``); ``None`` when its numbers can be printed."""
    rounds = interval.rounds
    counted = f"{rounds} round{'' if rounds == 1 else 's'}"
    if rounds < MIN_PRINTED_ROUNDS:
        return f"not measured ({counted})"
    # ``not <=`` also catches NaN; a missing bound is one that overflowed.
    if interval.high is None or not interval.high <= MAX_PRINTED_BOUND:
        return f"not measured ({counted}, unbounded)"
    return None


def describe_ratio(interval: RatioInterval | None) -> str:
    """:meth:`RatioInterval.describe`, or ``no interval`` for ``None``."""
    return "no interval" if interval is None else interval.describe()


def t_interval(
    values: Sequence[float] | np.ndarray, alpha: float
) -> tuple[float, float, float] | None:
    """Mean and two-sided ``1 - alpha`` Student-t interval of ``values`` (None if n < 2).

    The quantile comes from :func:`dlopt.measurement.distributions.t_quantile` (cached per
    level and degrees of freedom).
    """
    # Plain Python: the race calls this after every round, on a handful of values.
    vals = [float(v) for v in values]
    n = len(vals)
    if n < 2:
        return None
    mean = math.fsum(vals) / n
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in vals) / (n - 1))
    half = distributions.t_quantile(1.0 - alpha / 2.0, n - 1) * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def bootstrap_mean_interval(
    values: Sequence[float] | np.ndarray, confidence: float, resamples: int, seed: int
) -> tuple[float, float, float, str] | None:
    """Mean and two-sided bootstrap interval of the mean of ``values``: BCa (bias-corrected
    and accelerated), the percentile interval where BCa degenerates (every resample on one
    side of the mean); ``None`` for fewer than 3 values, no resamples or no spread."""
    arr = np.asarray(values, dtype=float)
    if arr.size < 3 or resamples <= 0 or float(arr.std()) == 0.0:
        return None
    mean = float(arr.mean())
    rng = np.random.default_rng(seed)
    means = arr[rng.integers(0, arr.size, size=(resamples, arr.size))].mean(axis=1)
    tail = (1.0 - confidence) / 2.0
    levels = (tail, 1.0 - tail)
    bias = distributions.normal_quantile(np.count_nonzero(means < mean) / resamples)
    leave_one_out = (arr.sum() - arr) / (arr.size - 1)
    spread = leave_one_out.mean() - leave_one_out
    acceleration = float((spread**3).sum() / (6.0 * ((spread**2).sum()) ** 1.5))
    corrected = tuple(_bca_level(level, bias, acceleration) for level in levels)
    for method, at in (("BCa", corrected), ("percentile", levels)):
        if all(math.isfinite(v) for v in at):
            low, high = (float(v) for v in np.percentile(means, [100.0 * v for v in at]))
            if math.isfinite(low) and math.isfinite(high):
                return mean, low, high, method
    return None


def _bca_level(level: float, bias: float, acceleration: float) -> float:
    """The percentile BCa reads for the interval end at ``level`` (nan where the bias
    correction is infinite: every resample on one side of the mean)."""
    if not math.isfinite(bias):
        return math.nan
    z = bias + distributions.normal_quantile(level)
    scale = 1.0 - acceleration * z
    if scale <= 0.0:  # an acceleration this large leaves BCa undefined
        return math.nan
    return 1.0 - distributions.normal_sf(bias + z / scale)


def ratio_from_log(
    interval: tuple[float, float, float] | None,
    *,
    confidence: float,
    method: str,
    rounds: int,
    per_look_confidence: float | None = None,
) -> RatioInterval:
    """Turn an interval of a mean log-ratio into a speedup interval (exp of each end)."""
    if interval is None:
        return RatioInterval(None, None, None, confidence, method, rounds, per_look_confidence)
    mean, low, high = interval

    def safe_exp(x: float) -> float | None:
        return finite_or_none(math.exp(x)) if x < 700 else None

    return RatioInterval(
        point=safe_exp(mean),
        low=safe_exp(low),
        high=safe_exp(high),
        confidence=confidence,
        method=method,
        rounds=rounds,
        per_look_confidence=per_look_confidence,
    )


def summarize_latency(
    *,
    case: str,
    samples_s: Sequence[float],
    burst_means_s: Sequence[float],
    statistics_s: Sequence[float],
    burst_calls: int,
    block_size: int,
    confidence: float,
    noise_threshold: float,
    page_faults: int | None,
    warmup_calls: int,
    warmup_converged: bool,
    timed_calls: int,
    untimed_calls: int,
    keep_samples: bool = True,
) -> LatencyStats:
    """``LatencyStats`` for one plan and case (all figures in milliseconds);
    ``keep_samples`` copies every timed sample into it (the race's final result does,
    its per-round snapshots do not)."""
    arr = np.asarray(samples_s, dtype=float) * 1e3
    n = int(arr.size)
    rounds = len(burst_means_s)

    def ms(value: float) -> float | None:
        return finite_or_none(value)

    if n == 0:
        return LatencyStats(
            case,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            0,
            block_size,
            rounds,
            None,
            None,
            confidence,
            None,
            False,
            warmup_calls,
            warmup_converged,
            timed_calls,
            untimed_calls,
            burst_calls,
        )
    p50, p90, p95, p99 = np.percentile(arr, [50, 90, 95, 99])
    mean = float(arr.mean())
    stdev = float(arr.std(ddof=1)) if n > 1 else None
    interval = t_interval(np.asarray(burst_means_s, dtype=float) * 1e3, 1.0 - confidence)
    low = high = None
    if interval is not None:
        _, low, high = interval
    logs = [math.log(v) for v in statistics_s if v > 0]
    spread = float(np.std(logs, ddof=1)) if len(logs) > 1 else None
    noisy = spread is not None and spread > noise_threshold
    faults = None
    if page_faults is not None and timed_calls > 0:
        faults = page_faults / timed_calls
    return LatencyStats(
        case=case,
        median_ms=ms(p50),
        mean_ms=ms(mean),
        min_ms=ms(float(arr.min())),
        p90_ms=ms(p90),
        p95_ms=ms(p95),
        p99_ms=ms(p99),
        stdev_ms=ms(stdev) if stdev is not None else None,
        samples=n,
        block_size=block_size,
        rounds=rounds,
        mean_low_ms=ms(low) if low is not None else None,
        mean_high_ms=ms(high) if high is not None else None,
        confidence=confidence,
        page_faults_per_call=faults,
        noisy=bool(noisy),
        warmup_calls=warmup_calls,
        warmup_converged=warmup_converged,
        timed_calls=timed_calls,
        untimed_calls=untimed_calls,
        burst_calls=burst_calls,
        round_spread=finite_or_none(spread) if spread is not None else None,
        samples_ms=tuple(float(x) for x in arr[np.isfinite(arr)]) if keep_samples else None,
    )
