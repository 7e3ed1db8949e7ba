"""Property-based tests of the selection rules (``dlopt.selection.rules``), on numbers alone.

The pipeline exercises these rules end to end; here each rule is checked directly over
generated costs and speedup intervals (``low <= point <= high``, bounds sometimes missing,
values clustered around the ``min_speedup`` bar so that the gate is often on the edge and
exact ties occur). The oracle below restates the documented rules (docs/selection.md):

* the gate: a plan clears it when the lower bound of its speedup, in the chosen
  objective, is at least ``min_speedup``;
* the baseline is the reference, replaced by the native plan with the best point among
  those that clear the gate against the reference;
* a challenger replaces the baseline only by clearing the gate against that baseline;
  among several, the best point wins, except that in the steady-state objective a cleared
  plan whose paired point over the current pick exceeds 1 takes its place (one pass from
  the best point down, equal points by name: head-to-head ranking on all rounds);
* ties on the point go to the plan listed first in ``eligible`` (``max`` keeps the first).
"""

from __future__ import annotations

import math

from attrs import evolve, frozen
from hypothesis import example, given, settings
from hypothesis import strategies as st

from dlopt.measurement import RatioInterval
from dlopt.selection.rules import (
    EAGER,
    Costs,
    SelectionOutcome,
    break_even_calls,
    choose,
    lifecycle_speedup,
    projected_total_ms,
)

STEADY = "steady_state_latency"
LIFECYCLE = "lifecycle_latency"
NATIVES = ("native_channels_last", "native_autocast")
CHALLENGERS = ("fx", "onnxruntime", "inductor")

# One-off costs stay positive in the selection scenarios: with none at all and no call
# left after the first calls the lifecycle ratio divides by zero (see the xfail below).
seconds = st.floats(1e-3, 30.0)
latencies_ms = st.floats(0.01, 100.0)
first_call_counts = st.integers(1, 4)
call_counts = st.integers(0, 10**6)
bars = st.one_of(st.just(1.0), st.just(1.02), st.floats(1.0, 1.3))
confidences = st.sampled_from([0.9, 0.95, 0.99])


def interval(low: float | None, point: float | None, high: float | None) -> RatioInterval:
    return RatioInterval(
        point=point, low=low, high=high, confidence=0.95, method="paired t", rounds=12
    )


@st.composite
def speedups(draw, bar: float) -> RatioInterval | None:
    """A speedup interval near ``bar``: often exactly on it, sometimes without bounds."""
    kind = draw(st.sampled_from(["full"] * 6 + ["no bounds", "no point", "none"]))
    if kind == "none":
        return None
    if kind == "no point":
        return interval(None, None, None)
    value = st.one_of(st.just(bar), st.floats(-0.5, 4.0))
    low, point, high = sorted(draw(st.lists(value, min_size=3, max_size=3)))
    point = max(point, 0.05)
    high = max(high, point)
    if kind == "no bounds":
        return interval(None, point, None)
    return interval(low, point, high)


@frozen
class Scenario:
    """Everything ``choose`` is given, plus the speedup table behind ``steady_speedup``."""

    objective: str
    min_speedup: float
    expected_calls: int | None
    eligible: tuple[Costs, ...]
    natives: tuple[str, ...]
    table: dict[tuple[str, str], RatioInterval | None]
    confidence: float

    def steady_speedup(self, name: str, against: str) -> RatioInterval | None:
        return self.table[(name, against)]

    def costs(self, name: str) -> Costs:
        return next(c for c in self.eligible if c.name == name)

    def native_names(self) -> list[str]:
        """The native plans in the order of ``eligible`` (the order that breaks ties)."""
        return [c.name for c in self.eligible if c.name in self.natives]

    def challengers(self) -> list[str]:
        return [c.name for c in self.eligible if c.name != EAGER and c.name not in self.natives]

    def run(
        self, eligible: tuple[Costs, ...] | None = None, unmeasured: tuple[str, ...] = ()
    ) -> SelectionOutcome:
        return choose(
            objective=self.objective,
            min_speedup=self.min_speedup,
            expected_calls=self.expected_calls,
            eligible=self.eligible if eligible is None else eligible,
            steady_speedup=self.steady_speedup,
            confidence=self.confidence,
            unmeasured=unmeasured,
            reference=EAGER,
            natives=self.natives,
        )

    # -- the oracle: the documented rules, restated --------------------------------
    def judged(self, name: str, against: str) -> RatioInterval | None:
        """The speedup of ``name`` over ``against`` in the scenario's objective."""
        steady = self.table[(name, against)]
        if self.objective == LIFECYCLE:
            assert self.expected_calls is not None
            return lifecycle_speedup(
                self.costs(name), self.costs(against), steady, self.expected_calls
            )
        return steady

    def clears(self, name: str, against: str) -> bool:
        s = self.judged(name, against)
        return s is not None and s.low is not None and s.low >= self.min_speedup

    def point(self, name: str, against: str) -> float:
        s = self.judged(name, against)
        return s.point if s is not None and s.point is not None else 0.0

    def ranked_pick(self, against: str) -> str | None:
        """The challenger that should serve: best point, then the head-to-head pass."""
        best = self.best_that_clear(self.challengers(), against)
        if not best:
            return None
        pick = best[0]
        cleared = [n for n in self.challengers() if self.clears(n, against)]
        if self.objective != STEADY or len(cleared) == 1:
            return pick
        for name in sorted(cleared, key=lambda n: (-self.point(n, against), n)):
            head = self.table[(name, pick)] if name != pick else None
            if head is not None and head.point is not None and head.point > 1.0:
                pick = name
        return pick

    def best_that_clear(self, names: list[str], against: str) -> list[str]:
        """The plans among ``names`` that clear the gate with the best point, in order."""
        cleared = [n for n in names if self.clears(n, against)]
        if not cleared:
            return []
        top = max(self.point(n, against) for n in cleared)
        return [n for n in cleared if self.point(n, against) == top]


@st.composite
def scenarios(draw, objective: str | None = None) -> Scenario:
    objective = objective or draw(st.sampled_from([STEADY, LIFECYCLE]))
    bar = draw(bars)
    natives = tuple(draw(st.lists(st.sampled_from(NATIVES), unique=True, max_size=2)))
    challengers = draw(st.lists(st.sampled_from(CHALLENGERS), unique=True, max_size=3))
    names = draw(st.permutations([EAGER, *natives, *challengers]))
    first_calls = draw(first_call_counts)  # one per workload case: the same for every plan
    eligible = tuple(
        Costs(n, draw(seconds), draw(seconds), draw(latencies_ms), first_call_count=first_calls)
        for n in names
    )
    # every ordered pair: the outcome may carry any plan's steady speedup over the baseline
    table = {(n, m): draw(speedups(bar)) for n in names for m in names if n != m}
    if objective == LIFECYCLE:
        expected = draw(call_counts)
    else:
        expected = draw(st.one_of(st.none(), call_counts))
    return Scenario(objective, bar, expected, eligible, natives, table, draw(confidences))


def fmt_point(s: RatioInterval | None) -> str:
    """The speedup point as the reason quotes it."""
    assert s is not None and s.point is not None
    return f"{s.point:.3f}x"


# -- the gate and the baseline ------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(scenarios())
def test_the_reference_is_kept_when_no_lower_bound_clears_the_bar(scenario):
    outcome = scenario.run()
    if not any(scenario.clears(n, EAGER) for n in scenario.natives):
        assert outcome.baseline == EAGER
        if not any(scenario.clears(c, EAGER) for c in scenario.challengers()):
            assert outcome.selected == EAGER
            assert outcome.reason.startswith(f"Kept {EAGER}")


@settings(max_examples=100, deadline=None)
@given(scenarios())
def test_a_challenger_wins_only_by_clearing_the_bar_with_the_best_point(scenario):
    outcome = scenario.run()
    best = scenario.best_that_clear(scenario.challengers(), outcome.baseline)
    if outcome.selected == outcome.baseline:
        assert best == []
    else:
        assert outcome.selected in scenario.challengers()
        assert scenario.clears(outcome.selected, outcome.baseline)
        # the best point among those that clear (an exact tie goes to the first listed),
        # then ranked head to head in the steady-state objective
        assert outcome.selected == scenario.ranked_pick(outcome.baseline)


@settings(max_examples=100, deadline=None)
@given(scenarios())
def test_a_native_plan_becomes_the_baseline_only_by_clearing_the_gate(scenario):
    outcome = scenario.run()
    best_native = scenario.best_that_clear(scenario.native_names(), EAGER)
    assert outcome.baseline == (best_native[0] if best_native else EAGER)
    assert outcome.reference == EAGER
    # natives are judged against the reference, every challenger against the baseline
    judged = {c.candidate: c for c in outcome.comparisons}
    assert set(judged) == set(scenario.natives) | set(scenario.challengers())
    for name, comparison in judged.items():
        against = EAGER if name in scenario.natives else outcome.baseline
        assert comparison.against == against
        assert comparison.speedup == scenario.judged(name, against)
        assert comparison.gate_passed == scenario.clears(name, against)
    # a native plan serves only as the baseline
    assert outcome.selected not in set(scenario.natives) - {outcome.baseline}


def test_a_challenger_that_beats_only_the_reference_loses_to_a_native_baseline():
    native, challenger = NATIVES[0], CHALLENGERS[0]
    table = {
        (native, EAGER): interval(1.3, 1.4, 1.5),
        (challenger, EAGER): interval(1.35, 1.45, 1.55),  # clears against eager...
        (challenger, native): interval(0.98, 1.04, 1.1),  # ...but not against the baseline
        (EAGER, native): interval(0.67, 0.71, 0.77),
    }
    scenario = Scenario(
        STEADY,
        1.02,
        None,
        tuple(Costs(n, 1.0, 0.1, 1.0) for n in (EAGER, native, challenger)),
        (native,),
        table,
        0.95,
    )
    outcome = scenario.run()
    assert (outcome.baseline, outcome.selected) == (native, native)
    assert outcome.reason.startswith(f"Kept {native} (")
    assert f"{native} replaced {EAGER} as the baseline (1.400x" in outcome.reason


# -- the lifecycle interval -------------------------------------------------------------------


@st.composite
def ordered_speedups(draw) -> tuple[RatioInterval, RatioInterval]:
    """Two positive intervals, the second at least the first at every end."""
    value = st.floats(0.05, 20.0)
    low, point, high = sorted(draw(st.lists(value, min_size=3, max_size=3)))
    up = st.one_of(st.just(0.0), st.floats(0.0, 5.0))
    higher_low = low + draw(up)
    higher_point = max(point + draw(up), higher_low)
    higher_high = max(high + draw(up), higher_point)
    return interval(low, point, high), interval(higher_low, higher_point, higher_high)


def costs(name: str) -> st.SearchStrategy[Costs]:
    return st.builds(
        Costs,
        st.just(name),
        seconds,
        seconds,
        latencies_ms,
        first_call_count=first_call_counts,
    )


@settings(max_examples=200, deadline=None)
@given(costs("challenger"), costs(EAGER), ordered_speedups(), call_counts)
def test_the_lifecycle_interval_is_monotone_in_the_steady_interval(
    challenger, baseline, steady, expected_calls
):
    lower, higher = (lifecycle_speedup(challenger, baseline, s, expected_calls) for s in steady)
    for mapped in (lower, higher):
        assert mapped.low <= mapped.point <= mapped.high
        assert (mapped.confidence, mapped.rounds) == (0.95, 12)
    assert lower.low <= higher.low
    assert lower.point <= higher.point
    assert lower.high <= higher.high


@settings(max_examples=200, deadline=None)
@given(costs("challenger"), costs(EAGER), st.floats(0.05, 20.0), call_counts)
def test_the_lifecycle_point_is_the_ratio_of_projected_totals(
    challenger, baseline, speedup, expected_calls
):
    # the challenger's steady latency written as baseline latency / paired speedup
    implied = evolve(challenger, steady_ms=baseline.steady_ms / speedup)
    mapped = lifecycle_speedup(
        challenger, baseline, interval(speedup, speedup, speedup), expected_calls
    )
    expected = projected_total_ms(baseline, expected_calls) / projected_total_ms(
        implied, expected_calls
    )
    assert math.isclose(mapped.point, expected, rel_tol=1e-9)


@settings(max_examples=50, deadline=None)
@example(Costs("c", 0.0, 0.0, 1.0), Costs(EAGER, 0.0, 0.0, 2.0), 1)
@given(
    costs("challenger").map(lambda c: evolve(c, setup_s=0.0, first_calls_s=0.0)),
    costs(EAGER),
    st.integers(0, 4),
)
def test_the_lifecycle_interval_is_defined_for_any_non_negative_costs(
    challenger, baseline, expected_calls
):
    mapped = lifecycle_speedup(challenger, baseline, interval(1.5, 2.0, 2.5), expected_calls)
    assert mapped is not None


# -- break-even calls ----------------------------------------------------------------------


@st.composite
def cost_pairs(draw) -> tuple[Costs, Costs]:
    """A challenger and a baseline over the same workload (same number of first calls)."""
    first_calls = draw(first_call_counts)
    ms = st.integers(0, 20_000).map(lambda n: n / 1e3)  # on a millisecond grid: exact ties
    pair = tuple(
        Costs(name, draw(ms), draw(ms), draw(st.integers(1, 50_000)) / 1e3, first_calls)
        for name in ("challenger", EAGER)
    )
    return pair


def cheaper_or_even(challenger: Costs, baseline: Costs, calls: int) -> bool:
    """The challenger's projected total is at most the baseline's (to rounding)."""
    c, b = projected_total_ms(challenger, calls), projected_total_ms(baseline, calls)
    return c <= b or math.isclose(c, b, rel_tol=1e-12)


def cheaper(challenger: Costs, baseline: Costs, calls: int) -> bool:
    c, b = projected_total_ms(challenger, calls), projected_total_ms(baseline, calls)
    return c < b and not math.isclose(c, b, rel_tol=1e-12)


def dearer(challenger: Costs, baseline: Costs, calls: int) -> bool:
    c, b = projected_total_ms(challenger, calls), projected_total_ms(baseline, calls)
    return c > b and not math.isclose(c, b, rel_tol=1e-12)


@settings(max_examples=300, deadline=None)
@given(cost_pairs())
def test_break_even_counts_calls_as_expected_calls_does(pair):
    """Break-even includes the first calls, as ``expected_calls`` and the projected
    totals count them; a plan that never needs to repay anything breaks even at 0."""
    challenger, baseline = pair
    calls, note = break_even_calls(challenger, baseline)
    if calls is None:
        assert "never repays" in note
        return
    assert calls == int(calls) >= 0
    assert cheaper_or_even(challenger, baseline, int(calls))
    if calls > challenger.first_call_count:
        assert not cheaper(challenger, baseline, int(calls) - 1)
    else:
        assert all(cheaper_or_even(challenger, baseline, n) for n in (0, calls, calls + 10**6))


def test_break_even_is_exact_where_the_extra_is_a_multiple_of_the_saving():
    challenger = Costs("challenger", 0.0, 0.016, 0.001, 1)
    baseline = Costs(EAGER, 0.002, 0.001, 0.002, 1)
    assert math.isclose(projected_total_ms(challenger, 13001), projected_total_ms(baseline, 13001))
    assert break_even_calls(challenger, baseline)[0] == 13001


@settings(max_examples=50, deadline=None)
@example((Costs("challenger", 0.0, 0.02, 1.0, 1), Costs(EAGER, 0.0, 0.01, 2.0, 1)))
@given(cost_pairs())
def test_at_the_break_even_call_count_the_challenger_is_no_dearer(pair):
    challenger, baseline = pair
    calls, _ = break_even_calls(challenger, baseline)
    if calls is not None and calls > 0:
        assert cheaper_or_even(challenger, baseline, int(calls))
        assert dearer(challenger, baseline, int(calls) - 1)


@settings(max_examples=200, deadline=None)
@given(cost_pairs(), call_counts)
def test_a_plan_that_never_repays_costs_more_at_every_call_count(pair, calls):
    challenger, baseline = pair
    needed, note = break_even_calls(challenger, baseline)
    if note == "costs more to set up and is not faster per call: never repays":
        assert needed is None
        assert not cheaper(challenger, baseline, calls)


# -- the reason ----------------------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(scenarios())
def test_the_reason_names_the_choice_and_quotes_its_numbers(scenario):
    outcome = scenario.run()
    reason, selected, baseline = outcome.reason, outcome.selected, outcome.baseline
    base_ms = f"{scenario.costs(baseline).steady_ms:.3f} ms"
    if len(scenario.eligible) == 1:
        assert reason.startswith(f"Kept {EAGER}: no other candidate")
        return
    bar = f"the {scenario.min_speedup:g}x bar at {scenario.confidence:.0%} confidence"
    assert bar in reason
    if selected != baseline:
        won = scenario.judged(selected, baseline)
        sel_ms = f"{scenario.costs(selected).steady_ms:.3f} ms"
        assert reason.startswith(f"Selected {selected}: ")
        assert f"over {baseline} is {fmt_point(won)} [" in reason
        assert f"({sel_ms} vs {base_ms} per request" in reason
        if scenario.objective == LIFECYCLE:
            totals = outcome.projected_total_ms
            assert totals == {
                c.name: projected_total_ms(c, scenario.expected_calls) for c in scenario.eligible
            }
            projected = f"{totals[selected] / 1e3:.1f}s vs {totals[baseline] / 1e3:.1f}s"
            assert f"projected {projected}" in reason
    else:
        assert reason.startswith(f"Kept {baseline} ({base_ms} per request): ")
        challengers = scenario.challengers()
        if challengers:
            best = max(challengers, key=lambda c: scenario.point(c, baseline))
            quoted = scenario.judged(best, baseline)
            if quoted is None:  # nothing measured: no lower bound to speak of
                assert f"the best challenger, {best}, has no " in reason
                assert "lower bound" not in reason
            else:
                measured = "no interval" if quoted.point is None else fmt_point(quoted)
                assert f"the best challenger, {best}, measured {measured}" in reason
    if baseline != EAGER:
        won = scenario.judged(baseline, EAGER)
        assert f"{baseline} replaced {EAGER} as the baseline ({fmt_point(won)} [" in reason


@settings(max_examples=30, deadline=None)
@example(
    Scenario(
        STEADY,
        1.02,
        None,
        (Costs(EAGER, 1.0, 0.1, 2.0), Costs("fx", 1.0, 0.1, 1.0)),
        (),
        {("fx", EAGER): interval(1.2, 1.5, 1.8), (EAGER, "fx"): interval(0.55, 0.67, 0.83)},
        0.95,
    )
)
@given(scenarios())
def test_the_reason_names_the_plans_the_budget_left_unmeasured(scenario):
    reason = scenario.run(unmeasured=("onnxruntime_unmeasured",)).reason
    assert "onnxruntime_unmeasured" in reason


# -- determinism and order ------------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(scenarios(), st.randoms(use_true_random=False))
def test_the_outcome_depends_on_the_order_of_eligible_only_through_exact_ties(scenario, rnd):
    outcome = scenario.run()
    assert scenario.run() == outcome  # same inputs, same outcome
    shuffled = list(scenario.eligible)
    rnd.shuffle(shuffled)
    again = scenario.run(tuple(shuffled))
    order = [c.name for c in shuffled]
    # Tie rule: among plans that clear the gate with the same best point, the one listed
    # first in ``eligible`` wins (for the baseline among natives, then for the selection).
    natives = scenario.best_that_clear(scenario.native_names(), EAGER)
    if natives:
        assert again.baseline == min(natives, key=order.index)
    if len(natives) <= 1:
        assert again.baseline == outcome.baseline
        challengers = scenario.best_that_clear(scenario.challengers(), outcome.baseline)
        if len(challengers) <= 1:
            assert again.selected == outcome.selected
            assert again.reason == outcome.reason or _quotes_a_tie(scenario, outcome)
            assert set(again.comparisons) == set(outcome.comparisons)
            assert again.projected_total_ms == outcome.projected_total_ms
        else:
            # The best point is tied: the first listed starts the head-to-head pass.
            reordered = evolve(scenario, eligible=tuple(shuffled))
            assert again.selected == reordered.ranked_pick(outcome.baseline)


def _quotes_a_tie(scenario: Scenario, outcome: SelectionOutcome) -> bool:
    """Whether the reason quotes the best of several plans tied on the point (order-bound).

    A kept baseline's reason quotes the best challenger; a kept reference's also the best
    native plan.
    """

    def tied(names: list[str], against: str) -> bool:
        points = [scenario.point(n, against) for n in names]
        return points.count(max(points, default=0.0)) > 1

    kept = outcome.selected == outcome.baseline
    natives_quoted = outcome.baseline == EAGER and tied(scenario.native_names(), EAGER)
    return natives_quoted or (kept and tied(scenario.challengers(), outcome.baseline))


def test_a_challenger_without_an_interval_is_not_said_to_miss_the_bar_by_its_lower_bound():
    outcome = choose(
        objective="steady_state_latency",
        min_speedup=1.05,
        expected_calls=None,
        eligible=(Costs(EAGER, 0.0, 0.0, 2.0), Costs("unjudged", 0.0, 0.0, 1.0)),
        steady_speedup=lambda name, against: None,
        confidence=0.95,
    )
    assert outcome.selected == EAGER
    assert "the best challenger, unjudged, has no steady-state latency interval" in outcome.reason
    assert "lower bound" not in outcome.reason and "measured no interval" not in outcome.reason
