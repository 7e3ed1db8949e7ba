"""The selection policy: which plan serves, given measured costs and intervals.

Pure functions over numbers, no torch: the optimizer gathers the evidence, this module
decides and explains. The rules:

* Only candidates that passed validation and every constraint take part (``eligible``).
* The baseline is the native path: the reference plan (eager fp32), replaced by a plan
  of the ``native`` role only when that plan itself clears the gate against the reference.
  Roles are declared by providers; names carry no meaning.
* A challenger replaces the baseline only when the lower confidence bound of its speedup
  against the baseline, in the objective the user chose, is at least ``min_speedup``.
  Among several that clear it, the best point estimate wins; in the steady-state
  objective the plans are then ranked head to head on every round both ran (a plan that
  beats the best-point one paired, takes its place: points against the baseline only
  cover the rounds the baseline ran).
* Indifference zone (steady-state objective): among the plans that cleared the gate and
  are shown within the zone of the leader (the lower bound of their paired speedup over
  it is at least ``1 / indifference_zone``), the one with the lower one-off cost (setup
  plus first calls) serves, then the one with the lower peak memory; the reason says so.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING

import attrs
from attrs import frozen

from dlopt.measurement import RatioInterval
from dlopt.measurement.stats import describe_ratio
from dlopt.platform.serialization import finite_or_none
from dlopt.vocabulary import Objective

if TYPE_CHECKING:
    from dlopt.selection.throughput import ThroughputOutcome

#: The name of core's built-in reference plan (the default ``reference`` of ``choose``).
EAGER = "eager_fp32"


@frozen
class Costs:
    """What one eligible candidate costs: build, first calls, steady state."""

    name: str
    setup_s: float
    first_calls_s: float  # summed over workload cases (each case's first call)
    steady_ms: float | None  # traffic-weighted mean request latency (None: not measured)
    first_call_count: int = 1
    peak_memory_mb: float | None = None  # the secondary rule's last key (None: unknown)


@frozen
class Comparison:
    """One candidate judged against a reference in the chosen objective."""

    candidate: str
    against: str
    speedup: RatioInterval | None
    gate_passed: bool
    break_even_calls: float | None
    break_even_note: str


@frozen
class SelectionOutcome:
    selected: str
    baseline: str
    reason: str
    comparisons: tuple[Comparison, ...]
    projected_total_ms: dict[str, float]
    #: The reference plan the baseline started from.
    reference: str = EAGER
    #: When a native plan became the baseline: every other eligible plan's paired
    #: steady-state speedup over it (computed once here, reported as ``speedup_vs_native``).
    steady_vs_baseline: dict[str, RatioInterval | None] = attrs.field(factory=dict)
    #: The throughput objective only: the served batch size and every (plan, batch size).
    throughput: ThroughputOutcome | None = None

    @property
    def batch_size(self) -> int:
        """The batch size the selected plan serves at (1 outside the throughput objective)."""
        return self.throughput.batch_size if self.throughput is not None else 1


def _steady(costs: Costs) -> float:
    if costs.steady_ms is None:
        raise ValueError(f"{costs.name} has no measured steady-state latency to compare")
    return costs.steady_ms


def projected_total_ms(costs: Costs, expected_calls: int) -> float:
    """Setup + first calls + the remaining expected calls at steady-state latency."""
    remaining = max(expected_calls - costs.first_call_count, 0)
    return (costs.setup_s + costs.first_calls_s) * 1e3 + remaining * _steady(costs)


#: One-off cost differences below this many milliseconds are float noise, not a cost.
_NOISE_MS = 1e-9


def break_even_calls(challenger: Costs, baseline: Costs) -> tuple[float | None, str]:
    """The number of calls (first calls included, as in ``expected_calls``) from which the
    challenger's projected total is no more than the baseline's: its extra one-off cost is
    repaid by faster calls.

    Uses the same statistic as the selection (traffic-weighted mean steady latency) and
    the same count as :func:`projected_total_ms`.
    """
    extra_ms = (
        challenger.setup_s + challenger.first_calls_s - baseline.setup_s - baseline.first_calls_s
    ) * 1e3
    saving_ms = _steady(baseline) - _steady(challenger)
    if extra_ms <= _NOISE_MS:
        if saving_ms >= 0:
            return 0.0, "no extra one-off cost"
        return None, "cheaper to set up but slower per call: never repays"
    if saving_ms <= 0:
        return None, "costs more to set up and is not faster per call: never repays"
    steady_calls = extra_ms / saving_ms
    # A quotient that is a whole number up to rounding error needs no extra call.
    steady_calls = math.ceil(steady_calls - 1e-9 * max(1.0, steady_calls))
    return (
        challenger.first_call_count + steady_calls,
        "first calls + extra setup and first-call time / per-call saving",
    )


def lifecycle_speedup(
    challenger: Costs, baseline: Costs, steady: RatioInterval | None, expected_calls: int
) -> RatioInterval | None:
    """Speedup of the projected total cost, carrying the steady-state interval through.

    The challenger's steady latency is written as ``baseline_ms / s`` where ``s`` is its
    paired steady-state speedup; the lifecycle ratio is increasing in ``s``, so mapping the
    interval's ends gives the lifecycle interval at the same confidence.
    """
    if steady is None or steady.point is None:
        return None
    remaining = max(expected_calls - challenger.first_call_count, 0)
    base_total = projected_total_ms(baseline, expected_calls)
    one_off_ms = (challenger.setup_s + challenger.first_calls_s) * 1e3

    def ratio(s: float | None) -> float | None:
        if s is None or s <= 0:
            return None
        total = one_off_ms + remaining * _steady(baseline) / s
        # Nothing to pay at all (no one-off cost, no calls left): no ratio to speak of.
        return finite_or_none(base_total / total) if total > 0 else None

    return RatioInterval(
        point=ratio(steady.point),
        low=ratio(steady.low),
        high=ratio(steady.high),
        confidence=steady.confidence,
        method=f"lifecycle over {expected_calls} calls from steady-state interval ({steady.method})",
        rounds=steady.rounds,
        per_look_confidence=steady.per_look_confidence,
    )


def choose(
    *,
    objective: str,
    min_speedup: float,
    expected_calls: int | None,
    eligible: Sequence[Costs],
    steady_speedup: Callable[[str, str], RatioInterval | None],
    confidence: float,
    unmeasured: Sequence[str] = (),
    budget_note: str | None = None,
    reference: str = EAGER,
    natives: Collection[str] = (),
    indifference_zone: float = 1.0,
) -> SelectionOutcome:
    """Pick the serving plan among ``eligible`` (which must include ``reference``).

    ``reference`` names the reference plan (eager fp32); ``natives`` the plans whose
    provider declares the native role: they may become the baseline.

    ``steady_speedup(candidate, reference)`` returns the paired steady-state speedup
    interval of ``candidate`` over ``reference`` from the race. ``unmeasured`` names
    candidates that passed validation and the constraints but were never timed in a
    round (the budget ran out first); they cannot win, and the reason says so.
    ``budget_note`` says why the budget ran out when one call overran it; the reason
    then carries it instead of advice to raise the budget. ``indifference_zone`` (> 1
    turns the secondary rule on) is the ratio within which two plans count as equally
    fast.
    """
    if objective == Objective.MIN_LATENCY:
        objective = Objective.STEADY_STATE_LATENCY  # the same rule, on the batch-1 case
    by_name = {c.name: c for c in eligible}
    if reference not in by_name:
        raise ValueError(f"{reference} must be eligible: it is the reference plan")
    if objective == Objective.LIFECYCLE_LATENCY and expected_calls is None:
        raise ValueError("the lifecycle objective needs expected_calls")
    if len(eligible) == 1:
        reason = (
            f"Kept {reference}: no other candidate passed validation and the constraints, so "
            f"there was nothing to race.{_sentence(budget_note)}"
        )
        if unmeasured:
            advice = budget_note or "raise MeasurementPolicy.max_time_s"
            reason = (
                f"Kept {reference}: the measurement budget ran out before any round compared "
                f"{', '.join(unmeasured)} with it, so no challenger could clear the "
                f"{min_speedup:g}x bar; {advice}."
            )
        return SelectionOutcome(reference, reference, reason, (), {}, reference)
    calls = expected_calls or 0
    totals = (
        {c.name: projected_total_ms(c, calls) for c in eligible}
        if expected_calls is not None
        else {}
    )

    def judge(name: str, against: str) -> Comparison:
        steady = steady_speedup(name, against)
        if objective == Objective.LIFECYCLE_LATENCY:
            speedup = lifecycle_speedup(by_name[name], by_name[against], steady, calls)
        else:
            speedup = steady
        passed = bool(speedup and speedup.low is not None and speedup.low >= min_speedup)
        calls_needed, note = break_even_calls(by_name[name], by_name[against])
        return Comparison(name, against, speedup, passed, calls_needed, note)

    comparisons: list[Comparison] = []
    natives_judged = [judge(c.name, reference) for c in eligible if c.name in natives]
    comparisons.extend(natives_judged)
    native_winners = [c for c in natives_judged if c.gate_passed]
    baseline = max(native_winners, key=_point).candidate if native_winners else reference

    challengers = [
        judge(c.name, baseline) for c in eligible if c.name != reference and c.name not in natives
    ]
    comparisons.extend(challengers)
    winners = [c for c in challengers if c.gate_passed]
    selected, pick_note = (
        _pick(winners, objective, steady_speedup, by_name, indifference_zone)
        if winners
        else (baseline, "")
    )
    reason = _reason(
        _Bar(objective, min_speedup, confidence),
        _Standings(reference, baseline, selected, natives_judged, challengers, by_name, totals),
        budget_note,
    )
    if pick_note:
        reason += f" {pick_note}"
    if unmeasured:
        reason += (
            f" Not compared: the measurement budget ran out before any round measured "
            f"{', '.join(unmeasured)}."
        )
    steady_vs_baseline = (
        {c.name: steady_speedup(c.name, baseline) for c in eligible if c.name != baseline}
        if baseline != reference
        else {}
    )
    return SelectionOutcome(
        selected, baseline, reason, tuple(comparisons), totals, reference, steady_vs_baseline
    )


def _pick(
    winners: Sequence[Comparison],
    objective: str,
    steady_speedup: Callable[[str, str], RatioInterval | None],
    costs: dict[str, Costs],
    zone: float,
) -> tuple[str, str]:
    """The winner that serves, and a sentence when the rule behind it is not the plain
    best point: head-to-head ranking on all rounds, then the indifference zone."""
    best = max(winners, key=_point)
    if objective != Objective.STEADY_STATE_LATENCY or len(winners) == 1:
        return best.candidate, ""
    by_point = best
    # One pass from the best point down (equal points by name): the pick depends on the
    # order of ``eligible`` only through an exact tie on the best point.
    for comparison in sorted(winners, key=lambda c: (-_point(c), c.candidate)):
        if comparison is best:
            continue
        head = steady_speedup(comparison.candidate, best.candidate)
        if head is not None and head.point is not None and head.point > 1.0:
            best = comparison
    note = ""
    if best is not by_point:
        note = (
            f"{best.candidate} ranks first head to head: paired over every round both ran, "
            f"it is faster than {by_point.candidate}, whose point against the baseline is "
            "higher on the baseline's rounds only."
        )
    if zone <= 1.0:
        return best.candidate, note
    tied = [best] + [
        c
        for c in winners
        if c is not best and _within(steady_speedup(c.candidate, best.candidate), zone)
    ]
    chosen = min(tied, key=lambda c: _secondary(costs[c.candidate]))
    if chosen is not best:
        one_off = costs[chosen.candidate].setup_s + costs[chosen.candidate].first_calls_s
        note = (
            f"{note} {chosen.candidate} serves instead of {best.candidate}: they are within "
            f"the {zone:g}x indifference zone of each other, and {chosen.candidate} costs less "
            f"to set up and call first ({one_off:.2f} s), then less peak memory."
        ).strip()
    return chosen.candidate, note


def _within(speedup: RatioInterval | None, zone: float) -> bool:
    return speedup is not None and speedup.low is not None and speedup.low >= 1.0 / zone


def _secondary(costs: Costs) -> tuple[float, float]:
    memory = costs.peak_memory_mb if costs.peak_memory_mb is not None else math.inf
    return (costs.setup_s + costs.first_calls_s, memory)


def _point(comparison: Comparison) -> float:
    return comparison.speedup.point if comparison.speedup and comparison.speedup.point else 0.0


@frozen
class _Bar:
    """What a challenger is judged by: the objective, and the speedup it must clear at
    which confidence."""

    objective: str
    min_speedup: float
    confidence: float


@frozen
class _Standings:
    """Where the plans ended: the reference, the baseline (the reference or a native that
    beat it), the selected plan, the comparisons of natives and challengers, and each
    plan's costs (``totals``: projected lifecycle cost, ms, when the objective has one)."""

    reference: str
    baseline: str
    selected: str
    natives: Sequence[Comparison]
    challengers: Sequence[Comparison]
    costs: dict[str, Costs]
    totals: dict[str, float]


def _reason(judged_by: _Bar, standings: _Standings, budget_note: str | None) -> str:
    """The plain-language reason of the selection, naming its numbers."""
    objective, min_speedup, confidence = (
        judged_by.objective,
        judged_by.min_speedup,
        judged_by.confidence,
    )
    reference, baseline, selected = standings.reference, standings.baseline, standings.selected
    natives, challengers = standings.natives, standings.challengers
    costs, totals = standings.costs, standings.totals
    metric = (
        "projected lifecycle cost"
        if objective == Objective.LIFECYCLE_LATENCY
        else "steady-state latency"
    )
    level = f"{confidence:.0%}"
    bar = f"the {min_speedup:g}x bar at {level} confidence"
    if baseline == reference:
        base_text = f"The baseline is {reference}"
        if natives:
            best = max(natives, key=_point)
            base_text += (
                f": the best native variant, {best.candidate}, measured {describe_ratio(best.speedup)} "
                f"vs {reference}, below {bar}"
            )
    else:
        won = next(c for c in natives if c.candidate == baseline)
        base_text = (
            f"{baseline} replaced {reference} as the baseline ({describe_ratio(won.speedup)} {metric} "
            f"speedup, clearing {bar})"
        )
    base_ms = _steady(costs[baseline])
    if selected != baseline:
        won = next(c for c in challengers if c.candidate == selected)
        extra = ""
        if objective == Objective.LIFECYCLE_LATENCY and totals:
            extra = f"; projected {totals[selected] / 1e3:.1f}s vs {totals[baseline] / 1e3:.1f}s"
        return (
            f"Selected {selected}: its {metric} speedup over {baseline} is {describe_ratio(won.speedup)}, "
            f"clearing {bar} ({_steady(costs[selected]):.3f} ms vs {base_ms:.3f} ms per request"
            f"{extra}). {base_text}.{_sentence(budget_note)}"
        )
    if challengers:
        best = max(challengers, key=_point)
        if best.speedup is None:
            # No interval: nothing to compare with the bar, so no "lower bound" to name.
            tail = (
                f"the best challenger, {best.candidate}, has no {metric} interval to judge "
                f"against {bar}"
            )
        else:
            tail = (
                f"the best challenger, {best.candidate}, measured {describe_ratio(best.speedup)} "
                f"({metric}), whose lower bound does not clear {bar}"
            )
    else:
        tail = "no challenger beyond the native variants passed validation and the constraints"
    return f"Kept {baseline} ({base_ms:.3f} ms per request): {tail}. {base_text}.{_sentence(budget_note)}"


def _sentence(note: str | None) -> str:
    """`` The budget ran out early: <note>.`` or nothing."""
    return f" The measurement budget ran out early: {note}." if note else ""
