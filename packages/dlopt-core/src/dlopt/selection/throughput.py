"""The throughput objective: which (plan, batch size) serves the most items per second,
under an optional latency budget per call.

Pure functions over the race's numbers, no torch (docs/selection.md, "Objectives for
latency and throughput"). The rules:

* Each (plan, batch size) is a case of the same interleaved, paired race; its throughput
  is ``batch / latency`` items per second.
* A batch size is *admissible* for a plan when the budget holds with an upper confidence
  bound: the mean latency's bound (the race's group-sequential boundary) for
  ``max_latency_ms``, a distribution-free order-statistic bound of the p99 for
  ``max_p99_latency_ms``. Both are Bonferroni-split over the plan's batch sizes: the
  plan's best admissible size is chosen among that many. A point estimate that meets the
  budget while its bound does not is refused.
* Each plan is represented by its best admissible batch size (highest point throughput).
  A challenger replaces the baseline only when the lower bound of its throughput gain,
  paired against the baseline at EVERY admissible baseline batch size, clears
  ``min_speedup``: the claim then holds against the baseline's true best size whichever
  it is (an intersection test needs no split on that side), and the challenger's own
  choice among its batch sizes is paid for by splitting alpha over them.
* Nothing admissible: no exception; the baseline serves at batch 1 and the reason names
  the (plan, batch size) that came closest to the budget and by how much.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence

from attrs import frozen

from dlopt.measurement import RatioInterval
from dlopt.measurement.distributions import binomial_quantile
from dlopt.measurement.sequential import boundary
from dlopt.measurement.stats import describe_ratio
from dlopt.platform.serialization import finite_or_none

#: The quantile the p99 budget bounds.
P99 = 0.99


@frozen
class LatencyBudget:
    """A limit on the latency of one call at the served batch size: the mean
    (``max_latency_ms``) or the p99 (``max_p99_latency_ms``)."""

    statistic: str  # "mean" or "p99"
    limit_ms: float

    @property
    def setting(self) -> str:
        """The constraint's name, as the user set it."""
        return "max_latency_ms" if self.statistic == "mean" else "max_p99_latency_ms"


@frozen
class BatchPoint:
    """One plan at one batch size: latency per call, throughput, and the budget check.

    ``latency_ms`` / ``p99_ms``: the mean and p99 latency per call over every timed call;
    ``latency_high_ms`` / ``p99_high_ms`` are the upper confidence bounds the budget is
    checked with; ``over_budget`` is how far the checked bound lies above the budget, as a
    share (0.15: 15% over; ``None`` when admissible or no budget). ``items_per_s`` (and its
    interval): the batch size over the race's per-round statistic (:func:`rate_interval`),
    the figure the plans and batch sizes are ranked and compared by.
    """

    plan: str
    batch_size: int
    case: int
    latency_ms: float | None
    latency_high_ms: float | None
    p99_ms: float | None
    p99_high_ms: float | None
    items_per_s: float | None
    items_per_s_low: float | None
    items_per_s_high: float | None
    admissible: bool = True
    budget_note: str | None = None
    over_budget: float | None = None


@frozen
class ThroughputComparison:
    """A challenger at its best admissible batch size against the baseline: ``gain`` is the
    binding (lowest lower bound) of its throughput ratios against the baseline's
    admissible batch sizes, at ``against_batch_size``."""

    candidate: str
    batch_size: int
    against: str
    against_batch_size: int
    gain: RatioInterval | None
    gate_passed: bool


@frozen
class ThroughputOutcome:
    """The served (plan, batch size), the baseline's, why, and the closest budget miss."""

    selected: str
    batch_size: int
    baseline: str
    baseline_batch_size: int
    reason: str
    comparisons: tuple[ThroughputComparison, ...]
    budget_met: bool
    closest_miss: BatchPoint | None = None
    #: Every (plan, batch size) measured, budget-checked: the throughput curves.
    points: tuple[BatchPoint, ...] = ()


def _t_bound(
    values: Sequence[float | None], alpha: float, first: int, last: int
) -> tuple[float, float] | None:
    """``(mean, half width)`` of ``values`` at the race's group-sequential boundary for a
    one-sided ``alpha`` (``None`` under 2 finite values)."""
    finite = [v for v in values if v is not None and math.isfinite(v)]
    n = len(finite)
    if n < 2:
        return None
    mean = math.fsum(finite) / n
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in finite) / (n - 1))
    return mean, boundary(alpha, first, last, n - 1) * sd / math.sqrt(n)


def mean_upper_bound(
    burst_means_ms: Sequence[float | None], alpha: float, first: int, last: int
) -> float | None:
    """One-sided upper bound of the mean latency from per-round burst means, at the race's
    group-sequential boundary for ``alpha`` (``None`` under 2 rounds)."""
    bound = _t_bound(burst_means_ms, alpha, first, last)
    return None if bound is None else finite_or_none(bound[0] + bound[1])


def rate_interval(
    batch_size: int, log_scores: Sequence[float | None], alpha: float, first: int, last: int
) -> tuple[float | None, float | None, float | None]:
    """Items per second at the race's per-round statistic and its interval: ``batch_size``
    over the geometric mean of the per-round burst statistic (``log_scores``: log seconds,
    the scores the paired comparisons use), the ends at the boundary for ``alpha`` on each
    side. The burst statistic is a low-order statistic (preemption only adds time), so a
    round a neighbour slowed does not move the pick; the mean latency per call is reported
    beside it."""
    finite = [v for v in log_scores if v is not None and math.isfinite(v)]
    if not finite:
        return None, None, None
    bound = _t_bound(finite, alpha, first, last)
    centre, half = (finite[0], None) if bound is None else bound

    def rate(log_seconds: float) -> float | None:
        return finite_or_none(batch_size / math.exp(log_seconds))

    if half is None:
        return rate(centre), None, None
    return rate(centre), rate(centre + half), rate(centre - half)


def quantile_upper_bound(samples_ms: Sequence[float], q: float, alpha: float) -> float | None:
    """Distribution-free upper confidence bound of the ``q`` quantile: the order statistic
    ``X_(k+1)`` with ``P(Binomial(n, q) <= k) >= 1 - alpha`` (``None``: too few samples
    for that confidence)."""
    ordered = sorted(v for v in samples_ms if math.isfinite(v))
    n = len(ordered)
    if n == 0:
        return None
    k = binomial_quantile(1.0 - alpha, n, q)
    return ordered[k] if k < n else None


def samples_for_quantile_bound(q: float, alpha: float) -> int:
    """The fewest samples for which :func:`quantile_upper_bound` exists: ``q**n <= alpha``
    (the largest sample is then the bound)."""
    return max(1, math.ceil(math.log(alpha) / math.log(q)))


def check_budget(point: BatchPoint, budget: LatencyBudget | None) -> BatchPoint:
    """``point`` marked admissible or refused under ``budget`` (its upper bound)."""
    import attrs

    if budget is None:
        return point
    figure, bound = (
        (point.latency_ms, point.latency_high_ms)
        if budget.statistic == "mean"
        else (point.p99_ms, point.p99_high_ms)
    )
    label = "mean latency" if budget.statistic == "mean" else "p99 latency"
    if bound is None:
        return attrs.evolve(
            point,
            admissible=False,
            budget_note=f"too few measurements for an upper bound of the {label}",
        )
    if bound <= budget.limit_ms:
        return attrs.evolve(point, admissible=True, budget_note=None, over_budget=None)
    point_text = f"point {figure:.3f} ms, " if figure is not None else ""
    return attrs.evolve(
        point,
        admissible=False,
        budget_note=(
            f"{label} upper bound {bound:.3f} ms ({point_text}budget {budget.limit_ms:g} ms) "
            f"is {bound / budget.limit_ms - 1:.0%} over {budget.setting}"
        ),
        over_budget=finite_or_none(bound / budget.limit_ms - 1.0),
    )


#: ``gain(candidate, its batch size, against, its batch size)``: the throughput ratio
#: interval of the first (plan, batch size) over the second.
Gain = Callable[[str, int, str, int], RatioInterval | None]


def choose_throughput(
    *,
    points: Mapping[str, Sequence[BatchPoint]],
    baseline: str,
    gain: Gain,
    min_speedup: float,
    confidence: float,
    budget: LatencyBudget | None,
) -> ThroughputOutcome:
    """The (plan, batch size) that serves, among the eligible plans in ``points`` (each
    plan's points checked against ``budget`` already, in batch-size order); the outcome
    carries every point (the throughput curves)."""
    decided = functools.partial(
        ThroughputOutcome, points=tuple(p for plan in points.values() for p in plan)
    )
    if baseline not in points:
        raise ValueError(f"{baseline} must be eligible: it is the baseline")
    best = {name: _best(plan_points) for name, plan_points in points.items()}
    base_best = best[baseline]
    base_sizes = [p.batch_size for p in points[baseline] if _usable(p)]
    level = f"{confidence:.0%}"
    bar = f"the {min_speedup:g}x bar at {level} confidence"
    budget_text = f" within {budget.setting} {budget.limit_ms:g} ms (upper bound)" if budget else ""
    if all(choice is None for choice in best.values()) and budget is None:
        return decided(
            baseline,
            1,
            baseline,
            1,
            f"Kept {baseline} at batch 1: no (plan, batch size) was timed (the measurement "
            "budget ran out before a round); raise MeasurementPolicy.max_time_s.",
            (),
            True,
        )
    if all(choice is None for choice in best.values()):
        miss = _closest_miss(points)
        unbounded = next(
            (p for plan in points.values() for p in plan if p.budget_note and miss is None), None
        )
        where = (
            f"; closest: {miss.plan} at batch {miss.batch_size}: {miss.budget_note}"
            if miss is not None and miss.budget_note
            else f"; e.g. {unbounded.plan} at batch {unbounded.batch_size}: "
            f"{unbounded.budget_note} (raise MeasurementPolicy.max_time_s and max_rounds)"
            if unbounded is not None
            else ""
        )
        return decided(
            baseline,
            1,
            baseline,
            1,
            f"Kept {baseline} at batch 1: no plan met the budget at any batch size{where}. "
            "Raise the budget, or race smaller batch sizes or faster plans.",
            (),
            False,
            miss,
        )
    comparisons: list[ThroughputComparison] = []
    for name, choice in best.items():
        if name == baseline or choice is None or base_best is None:
            continue
        gains = [(size, gain(name, choice.batch_size, baseline, size)) for size in base_sizes]
        binding_size, binding = min(gains, key=lambda item: _low(item[1]))
        passed = all(_low(g) >= min_speedup for _, g in gains)
        comparisons.append(
            ThroughputComparison(name, choice.batch_size, baseline, binding_size, binding, passed)
        )
    if base_best is None:
        # The baseline meets the budget at no batch size: the best plan that does serves.
        chosen = max(
            (c for c in best.values() if c is not None), key=lambda p: p.items_per_s or 0.0
        )
        return decided(
            chosen.plan,
            chosen.batch_size,
            baseline,
            1,
            f"Selected {chosen.plan} at batch {chosen.batch_size} "
            f"({_rate(chosen)}{budget_text}): {baseline} meets the budget at no batch size, "
            f"so no gain over it is needed.",
            tuple(comparisons),
            True,
        )
    winners = [c for c in comparisons if c.gate_passed]
    if winners:
        won = max(winners, key=lambda c: _items(best[c.candidate]))
        served = best[won.candidate]
        assert served is not None
        return decided(
            won.candidate,
            won.batch_size,
            baseline,
            base_best.batch_size,
            f"Selected {won.candidate} at batch {won.batch_size} ({_rate(served)}"
            f"{budget_text}): its throughput gain over {baseline} is {describe_ratio(won.gain)} at "
            f"{baseline}'s batch {won.against_batch_size} (its weakest against any admissible "
            f"{baseline} batch size), clearing {bar}; {baseline} is best at batch "
            f"{base_best.batch_size} ({_rate(base_best)}).",
            tuple(comparisons),
            True,
        )
    tail = ""
    if comparisons:
        top = max(comparisons, key=lambda c: _point(c.gain))
        tail = (
            f" The best challenger, {top.candidate} at batch {top.batch_size}, gains "
            f"{describe_ratio(top.gain)} against {baseline} at batch {top.against_batch_size}, whose "
            f"lower bound does not clear {bar}."
        )
    elif budget is not None:
        tail = " No challenger met the budget at any batch size."
    else:
        tail = " No challenger was timed beside it."
    return decided(
        baseline,
        base_best.batch_size,
        baseline,
        base_best.batch_size,
        f"Kept {baseline} at batch {base_best.batch_size} ({_rate(base_best)}{budget_text})."
        + tail,
        tuple(comparisons),
        True,
    )


def _items(point: BatchPoint | None) -> float:
    return (point.items_per_s or 0.0) if point is not None else 0.0


def _usable(point: BatchPoint) -> bool:
    return point.admissible and point.items_per_s is not None


def _best(plan_points: Sequence[BatchPoint]) -> BatchPoint | None:
    usable = [p for p in plan_points if _usable(p)]
    return max(usable, key=lambda p: p.items_per_s or 0.0) if usable else None


def _closest_miss(points: Mapping[str, Sequence[BatchPoint]]) -> BatchPoint | None:
    missed = [p for plan in points.values() for p in plan if p.over_budget is not None]
    return min(missed, key=lambda p: p.over_budget or 0.0) if missed else None


def _low(interval: RatioInterval | None) -> float:
    return interval.low if interval is not None and interval.low is not None else -math.inf


def _point(interval: RatioInterval | None) -> float:
    return interval.point if interval is not None and interval.point is not None else 0.0


def _rate(point: BatchPoint) -> str:
    return f"{point.items_per_s:,.1f} items/s" if point.items_per_s is not None else "no rate"
