"""Decision time on a fake clock: the time budget's end, priors, pruning and exhaustive.

Every fake plan spends its build, first-call and call time on one fake clock, so the
budget, the screening and the race run exactly as they would, without waiting.
"""

from __future__ import annotations

import json
import time
import types

import pytest
import torch

from dlopt.contract.priors import OperatorMix, Prior
from dlopt.pipeline.measure import FINISH_RESERVE_S
from dlopt.pipeline.prepare import BUILD_PAST_BUDGET
from dlopt.settings.policy import OptimizationPolicy, auto_time_budget, budget_seconds
from dlopt.testing.fake_race import FakeRace
from dlopt.vocabulary import Status

X = torch.randn(4, 16)


class Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(16, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)


def prior(speedup: float, low: float, high: float, cost_s: float) -> Prior:
    return Prior(speedup, low, high, cost_s, "the test's")


def select(race: FakeRace, *providers, **policy):
    return race.optimizer(*providers, **policy).select_signature(Tiny().eval(), X)


def test_when_the_budget_ends_the_best_plan_confirmed_so_far_serves():
    race = FakeRace()
    fast = race.fake("fast", 1e-3, setup_time_s=2.0, declared_prior=prior(2.5, 1.5, 4.0, 2.0))
    slow_build = race.fake(
        "slow_build", 0.5e-3, setup_time_s=40.0, declared_prior=prior(2.0, 1.2, 8.0, 40.0)
    )
    decision = select(race, race.fake("eager_fp32", 3e-3), fast, slow_build, time_budget_s=10.0)
    report = decision.report
    assert report.selected_plan == "fast"
    assert slow_build.builds == 0  # its 40 s could not fit in what was left of 10 s
    skipped = report.candidate("slow_build")
    assert skipped.status is Status.NOT_BUILT
    assert skipped.not_built.startswith("no time left: its build and first calls are expected")
    assert "2.00x [1.20, 8.00]" in skipped.not_built  # the plan's estimated value
    assert skipped.prior.cost_s == 40.0
    timing = report.decision_time
    assert timing.budget_s == 10.0 and timing.budget_rule == "policy"
    assert timing.not_built == ("slow_build",)
    assert timing.spent_s <= 10.0 + FINISH_RESERVE_S
    # The report says it in strict JSON too.
    data = json.loads(report.to_json())
    assert data["decision_time"]["not_built"] == ["slow_build"]
    row = next(c for c in data["candidates"] if c["name"] == "slow_build")
    assert row["status"] == "not_built" and row["prior"]["high"] == 8.0


def test_a_build_that_leaves_the_race_less_than_its_reserve_is_abandoned_not_raced_late():
    race = FakeRace()
    # Its build takes the whole budget: racing it would spend seconds the budget does not
    # have, so it is abandoned and the reference serves, within the budget.
    late = race.fake("late", 1e-3, setup_time_s=9.5, declared_prior=prior(3.0, 2.0, 4.0, 1.0))
    decision = select(race, race.fake("eager_fp32", 3e-3), late, time_budget_s=10.0)
    report = decision.report
    assert report.candidate("late").not_built.startswith(BUILD_PAST_BUDGET)
    assert report.selected_plan == "eager_fp32"
    assert report.decision_time.spent_s <= 10.0 + FINISH_RESERVE_S


def test_a_plan_whose_prior_cannot_beat_the_confirmed_leader_is_not_built():
    race = FakeRace()
    fast = race.fake("fast", 1e-3, declared_prior=prior(3.0, 2.0, 4.0, 0.5))
    hopeless = race.fake("hopeless", 2.5e-3, declared_prior=prior(1.1, 0.9, 1.3, 5.0))
    decision = select(race, race.fake("eager_fp32", 3e-3), fast, hopeless, time_budget_s=None)
    report = decision.report
    assert report.selected_plan == "fast"
    assert hopeless.builds == 0
    reason = report.candidate("hopeless").not_built
    assert reason.startswith("its prior is at most 1.30x (the test's), and fast is confirmed at")
    screened = report.candidate("fast").prior.screening
    assert screened is not None and screened.low > 1.3 * 1.02


def test_a_prior_below_the_reference_is_not_built_even_before_anything_is_screened():
    race = FakeRace()
    worse = race.fake("worse", 5e-3, declared_prior=prior(0.7, 0.5, 0.95, 1.0))
    decision = select(race, race.fake("eager_fp32", 3e-3), worse, time_budget_s=None)
    assert worse.builds == 0
    assert "eager_fp32 is the reference (1x)" in decision.report.candidate("worse").not_built


def test_a_wrong_prior_hides_a_fast_plan_which_exhaustive_finds_and_the_report_shows_the_miss():
    def providers(race: FakeRace):
        return (
            race.fake("eager_fp32", 3e-3),
            race.fake("fast", 1.5e-3, declared_prior=prior(2.0, 1.5, 2.5, 0.5)),
            # Measured 6x, but its prior says at most 1.3x.
            race.fake("surprise", 0.5e-3, declared_prior=prior(1.1, 0.9, 1.3, 0.5)),
        )

    race = FakeRace()
    pruned = select(race, *providers(race), time_budget_s=None).report
    assert pruned.candidate("surprise").status is Status.NOT_BUILT
    assert pruned.selected_plan == "fast"

    race = FakeRace()
    found = select(race, *providers(race), exhaustive=True).report
    assert found.selected_plan == "surprise"
    assert found.decision_time.exhaustive and found.decision_time.budget_s is None
    assert found.decision_time.not_built == ()
    miss = found.candidate("surprise").prior.miss
    assert miss is not None and "above its prior's interval [0.90, 1.30]" in miss
    assert found.candidate("fast").prior.miss is None  # measured inside its interval


def test_the_automatic_budget_builds_only_the_plans_expected_to_beat_the_confirmed_leader():
    def providers(race: FakeRace):
        return (
            race.fake("eager_fp32", 3e-3),
            race.fake("fast", 1e-3, declared_prior=prior(3.0, 2.0, 4.0, 0.5)),
            # It could win (its optimistic bound is 5x), but it is expected at 1.5x.
            race.fake(
                "long_shot", 2e-3, setup_time_s=2.0, declared_prior=prior(1.5, 0.8, 5.0, 2.0)
            ),
            # Nothing is known of it (no prior): it expects nothing, and is built.
            race.fake("stranger", 2e-3, setup_time_s=1.0),
        )

    race = FakeRace()
    auto = select(race, *providers(race), time_budget_s="auto").report
    reason = auto.candidate("long_shot").not_built
    assert auto.candidate("long_shot").status is Status.NOT_BUILT
    assert reason.startswith("its prior expects 1.50x [0.80, 5.00], ~2.0 s (the test's)")
    assert "no faster than fast, which is confirmed at" in reason
    assert auto.selected_plan == "fast"
    assert auto.candidate("fast").prior.screening is not None
    assert auto.candidate("stranger").prior.source == "no evidence"
    assert auto.candidate("stranger").not_built is None

    # A budget the user set builds every plan that could still win, and so does none.
    for budget in (30.0, None):
        race = FakeRace()
        report = select(race, *providers(race), time_budget_s=budget).report
        assert report.candidate("long_shot").not_built is None
        assert report.candidate("long_shot").status is not Status.NOT_BUILT


def test_a_prior_within_a_few_percent_of_the_leader_does_not_prune_the_plan():
    # A table of pooled models cannot order plans this close on one model (OpenVINO fp32
    # and ONNX Runtime int8 on the conv models: PRIOR_RESOLUTION).
    race = FakeRace()
    eager = race.fake("eager_fp32", 3e-3)
    fast = race.fake("fast", 1e-3, declared_prior=prior(3.0, 2.0, 4.0, 0.5))
    close = race.fake("close", 0.9e-3, setup_time_s=2.0, declared_prior=prior(2.92, 1.5, 5.0, 2.0))
    behind = race.fake("behind", 0.8e-3, setup_time_s=2.0, declared_prior=prior(2.8, 1.5, 5.0, 2.0))
    report = select(race, eager, fast, close, behind, time_budget_s="auto").report
    assert close.builds == 1 and report.candidate("close").not_built is None
    assert behind.builds == 0
    assert report.candidate("behind").not_built.startswith("its prior expects 2.80x")
    assert report.selected_plan == "close"


def test_the_leaders_miss_of_its_prior_is_read_as_the_models_for_the_plans_not_yet_built():
    # The leader's prior says 4x and it measures 3x: the compiled plan's 3.3x reads as
    # about 2.7x here, and it is not built.
    race = FakeRace()
    eager = race.fake("eager_fp32", 3e-3)
    fast = race.fake("fast", 1e-3, declared_prior=prior(4.0, 2.0, 6.0, 0.5))
    compiled = race.fake(
        "compiled", 1.1e-3, setup_time_s=5.0, declared_prior=prior(3.3, 1.0, 6.0, 5.0)
    )
    report = select(race, eager, fast, compiled, time_budget_s="auto").report
    assert compiled.builds == 0
    reason = report.candidate("compiled").not_built
    assert reason.startswith("its prior expects 3.30x [1.00, 6.00], ~5.0 s (the test's), 2.")
    assert "x on this model (fast measures 0.7" in reason and "x its prior)" in reason

    # The leader's prior says 2x and it measures 3x: the compiled plan's 2.5x reads as
    # about 3.4x here, and it is built (and wins).
    race = FakeRace()
    eager = race.fake("eager_fp32", 3e-3)
    fast = race.fake("fast", 1e-3, declared_prior=prior(2.0, 1.5, 4.0, 0.5))
    # Built before the compiled plan (more gain per second), its build is what the fast
    # plan's screening spares: the screening confirms the leader.
    spared = race.fake("spared", 2e-3, setup_time_s=1.0, declared_prior=prior(1.5, 1.0, 1.9, 1.0))
    compiled = race.fake(
        "compiled", 0.8e-3, setup_time_s=5.0, declared_prior=prior(2.5, 1.0, 6.0, 5.0)
    )
    report = select(race, eager, fast, spared, compiled, time_budget_s="auto").report
    assert report.candidate("fast").prior.screening is not None and spared.builds == 0
    assert compiled.builds == 1 and report.candidate("compiled").not_built is None
    assert report.selected_plan == "compiled"


def test_plans_are_built_in_order_of_expected_gain_per_second():
    race = FakeRace()
    order: list[str] = []
    optimizer = race.optimizer(
        race.fake("eager_fp32", 3e-3),
        race.fake("cheap_small", 2.5e-3, declared_prior=prior(1.2, 1.0, 3.0, 0.5)),
        race.fake("costly_big", 1e-3, declared_prior=prior(3.0, 2.0, 4.0, 20.0)),
        race.fake("cheap_big", 1e-3, declared_prior=prior(3.0, 2.0, 4.0, 1.0)),
        time_budget_s=None,
    )
    built = [lambda e: order.append(e.candidate) if e.kind.value == "candidate_built" else None]
    optimizer.with_policy(optimizer.policy, observers=built).select_signature(Tiny().eval(), X)
    assert order[:3] == ["eager_fp32", "cheap_big", "cheap_small"]


def test_a_plan_is_screened_only_when_a_build_it_could_spare_is_next():
    race = FakeRace()
    eager = race.fake("eager_fp32", 3e-3)
    # Built first (near free), then the strong plan; the costly one could be spared by
    # either, and the strong plan's screening spares it.
    weak = race.fake("weak", 2e-3, declared_prior=prior(1.5, 1.2, 1.8, 0.05))
    strong = race.fake("strong", 1e-3, declared_prior=prior(3.0, 2.0, 4.0, 1.0))
    costly = race.fake(
        "costly", 2.5e-3, setup_time_s=20.0, declared_prior=prior(1.1, 0.9, 1.4, 20.0)
    )
    report = select(race, eager, weak, strong, costly, time_budget_s=None).report
    assert costly.builds == 0 and "strong is confirmed at" in report.candidate("costly").not_built
    assert report.candidate("strong").prior.screening is not None
    assert report.candidate("weak").prior.screening is None  # its rounds would spare nothing more


def test_the_automatic_budget_grows_with_the_model_and_exhaustive_has_none():
    assert budget_seconds(OptimizationPolicy(), 0.002) == (auto_time_budget(0.002), "auto")
    assert auto_time_budget(0.1) > auto_time_budget(0.002) >= 10.0
    assert auto_time_budget(100.0) == 300.0
    assert budget_seconds(OptimizationPolicy(time_budget_s=20), 0.1) == (20.0, "policy")
    assert budget_seconds(OptimizationPolicy(exhaustive=True), 0.1) == (None, "none")
    assert budget_seconds(OptimizationPolicy(time_budget_s=None), 0.1) == (None, "none")


@pytest.mark.parametrize("bad", [0, -1, float("inf"), "soon", True])
def test_a_time_budget_that_is_no_number_of_seconds_is_refused(bad):
    from dlopt.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="time_budget_s must be a number of seconds"):
        OptimizationPolicy(time_budget_s=bad)


def test_the_operator_mix_names_its_kind():
    assert OperatorMix(conv=0.7, other=0.3).kind == "conv"
    assert OperatorMix(linear=0.6, other=0.4).kind == "linear"
    assert OperatorMix(conv=0.3, linear=0.3, has_attention=True, other=0.4).kind == "attention"
    assert OperatorMix().kind == "other"


class InterruptedOnce(Tiny):
    """Tiny, whose first call stalls outside its linear layer (as when the scheduler takes
    the core away there)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls == 1:
            time.sleep(0.03)
        return super().forward(x)


def test_a_stall_in_one_timed_call_does_not_change_the_kind_of_a_short_model(monkeypatch):
    import dlopt.pipeline.ground_truth as ground_truth
    from dlopt.pipeline.ground_truth import operator_mix

    # Every pass runs, however long the stalled one took on a loaded machine.
    monkeypatch.setattr(ground_truth, "MIX_TIMING_S", 60.0)

    model = InterruptedOnce().eval()
    reference = types.SimpleNamespace(
        cases=[types.SimpleNamespace(args=(X,), kwargs={})], calling_context=torch.no_grad
    )
    mix = operator_mix(model, reference)
    assert model.calls == ground_truth.MIX_MAX_PASSES
    assert mix.kind == "linear", mix.describe()


class SlowTiny(Tiny):
    """Tiny, whose eager calls take ``call_s`` on ``clock``: the reference's call time."""

    def __init__(self, clock, call_s: float) -> None:
        super().__init__()
        self.clock, self.call_s = clock, call_s

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.clock.advance(self.call_s)
        return super().forward(x)


def select_slow(race: FakeRace, reference_s: float, *plans, **policy):
    """The report of a selection of ``plans`` against an eager fp32 whose calls take
    ``reference_s`` on the race's clock."""
    eager = race.fake("eager_fp32", reference_s)
    optimizer = race.optimizer(eager, *plans, **policy)
    return optimizer.select_signature(SlowTiny(race.clock, reference_s).eval(), X).report


def test_a_race_with_no_time_for_every_plan_races_the_most_promising_and_says_why():
    race = FakeRace()
    fast = race.fake("fast", 3e-3, setup_time_s=0.05, declared_prior=prior(3.0, 2.0, 4.0, 0.05))
    # Each is expected to build in 0.1 s and takes 1 s: the builds eat the race's time,
    # and a race of all six in what is left would end before its first rounds decide.
    late = [
        race.fake(f"late_{i}", 6e-3, setup_time_s=1.0, declared_prior=prior(1.8, 1.2, 4.0, 0.1))
        for i in range(4)
    ]
    report = select_slow(race, 10e-3, fast, *late, time_budget_s=5.0)
    assert report.selected_plan == "fast"
    assert report.candidate("fast").race.gate_passed is True
    built = [c for c in report.candidates if c.name.startswith("late_") and c.not_built is None]
    benched = [c for c in report.candidates if c.not_raced is not None]
    assert built and benched == built, "the race had room for the reference and one challenger"
    assert all(c.status is Status.LOST for c in benched)
    assert all(c.race.verdict is None for c in benched)  # never timed
    assert "room for 2 plans (eager_fp32, fast)" in benched[0].not_raced
    assert "its prior: 1.80x [1.20, 4.00]" in benched[0].not_raced
    data = json.loads(report.to_json())["candidates"]
    row = next(c for c in data if c["name"] == benched[0].name)
    assert row["status"] == "lost" and row["not_raced"] == benched[0].not_raced


def test_an_exhaustive_selection_races_every_plan_it_built():
    # The same plans whose slow builds leave a 5 s budget's race room for two of them.
    race = FakeRace()
    plans = [
        race.fake(f"plan_{i}", 6e-3, setup_time_s=1.0, declared_prior=prior(1.8, 1.2, 4.0, 0.1))
        for i in range(4)
    ]
    optimizer = race.optimizer(race.fake("eager_fp32", 10e-3), *plans, exhaustive=True)
    report = optimizer.select_signature(SlowTiny(race.clock, 10e-3).eval(), X).report
    assert all(c.not_raced is None for c in report.candidates)
    assert all(report.candidate(f"plan_{i}").race.verdict is not None for i in range(4))


def test_builds_that_ate_the_budget_still_leave_the_race_its_deciding_rounds():
    from dlopt.settings.workload import WorkloadCase, WorkloadProfile

    race = FakeRace()
    fast = race.fake("fast", 3e-3, setup_time_s=0.05, declared_prior=prior(3.0, 2.0, 4.0, 0.05))
    # Expected to build in 0.1 s, it takes 9 s: almost nothing of the 10 s budget is left.
    late = race.fake("late", 6e-3, setup_time_s=9.0, declared_prior=prior(1.8, 1.2, 4.0, 0.1))
    # Three cases: every round of the race calls each of them, whatever its weight.
    workload = WorkloadProfile(
        [WorkloadCase(f"case{i}", args=(X,), weight=w) for i, w in enumerate((0.7, 0.25, 0.05))]
    )
    optimizer = race.optimizer(race.fake("eager_fp32", 10e-3), fast, late, time_budget_s=10.0)
    report = optimizer.select(SlowTiny(race.clock, 10e-3).eval(), workload).report
    # Built past the deadline for builds: its first calls would eat the race's reserve.
    assert report.candidate("late").not_built.startswith(BUILD_PAST_BUDGET)
    assert report.selected_plan == "fast"
    assert report.candidate("fast").race.gate_passed is True
    assert report.measurement.rounds >= 3


def beside_a_runaway(name: str, **cost):
    """A 10 s budget's selection of a cheap plan (built first, the leader) and ``name``,
    more promising and expected to build in 1 s, whose build or first calls take what
    ``cost`` says: the runaway's fake and the report."""
    race = FakeRace()
    fast = race.fake("fast", 1e-3, setup_time_s=0.1, declared_prior=prior(2.0, 1.5, 3.0, 0.1))
    runaway = race.fake(name, 0.5e-3, declared_prior=prior(5.0, 3.0, 8.0, 1.0), **cost)
    eager = race.fake("eager_fp32", 3e-3)
    return runaway, select(race, eager, fast, runaway, time_budget_s=10.0).report


def test_a_build_running_past_the_budget_is_abandoned_and_the_race_keeps_its_reserve():
    # Expected to build in 1 s, it would take 60 s: the watchdog abandons it at the
    # budget's deadline less the race's reserve, and the race still confirms the leader.
    endless, report = beside_a_runaway("endless", setup_time_s=60.0, build_steps=600)
    assert endless.builds == 1 and endless.builds_finished == 0  # abandoned midway
    row = report.candidate("endless")
    assert row.status is Status.NOT_BUILT
    assert row.not_built.startswith(f"{BUILD_PAST_BUDGET}: abandoned after")
    assert report.decision_time.not_built == ("endless",)
    assert report.selected_plan == "fast"
    assert report.candidate("fast").race.gate_passed is True
    assert report.measurement.rounds >= 3
    assert report.decision_time.spent_s <= 10.0 * 1.15


def test_first_calls_that_compile_past_the_budget_are_abandoned_too():
    # A lazy compile lands in the first call: the same deadline holds there.
    _, report = beside_a_runaway("lazy", first_call_time_s=60.0)
    assert report.candidate("lazy").not_built.startswith(BUILD_PAST_BUDGET)
    assert report.selected_plan == "fast"
    assert report.measurement.rounds >= 3


def test_without_a_budget_no_build_is_abandoned():
    race = FakeRace()
    slow = race.fake(
        "slow", 1e-3, setup_time_s=30.0, build_steps=30, declared_prior=prior(3.0, 2.0, 4.0, 1.0)
    )
    report = select(race, race.fake("eager_fp32", 3e-3), slow, exhaustive=True).report
    assert slow.builds_finished == 1
    assert report.candidate("slow").not_built is None
    assert report.selected_plan == "slow"


def test_a_slow_model_under_a_tight_budget_still_builds_and_races_its_best_plan():
    # 100 ms a reference call: the race of every plan a budget would plan for does not fit
    # in 20 s, but the least race that confirms one challenger does.
    race = FakeRace()
    fast = race.fake("fast", 0.03, setup_time_s=2.0, declared_prior=prior(3.0, 2.0, 4.0, 2.0))
    other = race.fake("other", 0.06, setup_time_s=2.0, declared_prior=prior(1.8, 1.2, 4.0, 2.0))
    report = select_slow(race, 0.1, fast, other, time_budget_s=20.0)
    assert fast.builds == 1
    assert report.selected_plan == "fast"
    assert report.candidate("fast").race.gate_passed is True
    assert report.decision_time.spent_s <= 20.0 * 1.1


def test_a_race_is_priced_in_calls_of_the_models_own_length():
    # 240 ms a reference call (mobilenet_v2 on a 2-core AVX2 CPU): three rounds of a
    # burst of six and a settling call each, and a warm-up, for eager and a challenger
    # at its prior's low bound, fit beside a 2 s build in a 20 s budget. Priced as 31
    # calls a plan with a 1.5x margin (22 s), nothing was built and eager fp32 was kept.
    race = FakeRace()
    int8 = race.fake("int8", 0.09, setup_time_s=2.0, declared_prior=prior(2.1, 1.3, 4.6, 2.0))
    report = select_slow(race, 0.24, int8, time_budget_s=20.0)
    assert int8.builds == 1
    assert report.selected_plan == "int8"
    assert report.candidate("int8").race.gate_passed is True
    assert report.decision_time.spent_s <= 20.0 * 1.1


def test_cheap_plans_built_early_do_not_crowd_a_more_promising_one_out_of_the_budget():
    # Four cheap, unpromising plans are built first (the most gain per second); a race of
    # all of them and the promising one would not fit in what is left, but the race would
    # leave the cheap ones out, so the promising plan is still built, and it wins.
    race = FakeRace()
    cheap = [
        race.fake(f"cheap_{i}", 9e-3, setup_time_s=0.01, declared_prior=prior(1.05, 0.9, 1.2, 0.01))
        for i in range(4)
    ]
    best = race.fake("best", 2e-3, setup_time_s=1.0, declared_prior=prior(4.0, 3.0, 5.0, 1.0))
    report = select_slow(race, 10e-3, *cheap, best, time_budget_s=4.5)
    assert all(plan.builds == 1 for plan in cheap)
    assert report.candidate("best").not_built is None and best.builds == 1
    assert report.selected_plan == "best"
    assert report.candidate("best").race.gate_passed is True


def test_a_weak_plan_validated_first_does_not_price_a_better_ones_race_in_full():
    # 89 ms a reference call (resnet50 at batch 1 on a 2-core AVX2 CPU). A native plan
    # (cheap, little promise) is built and validated first; then the int8 plan, which
    # promises more than any plan in the race, needs beside its build only the least race
    # that can confirm it: the race leaves the native plan out to make room. Priced as
    # the full race of two plans (14 s), its 6 s build (9 s with the firm margin) did not
    # fit in the 18 s left, and eager fp32 was kept.
    race = FakeRace()
    native = race.fake("native", 0.085, setup_time_s=0.2, declared_prior=prior(1.16, 0.8, 2.0, 0.2))
    int8 = race.fake("int8", 0.04, setup_time_s=6.0, declared_prior=prior(2.66, 2.0, 3.5, 6.0))
    report = select_slow(race, 0.089, native, int8, time_budget_s=20.0)
    assert native.builds == 1 and int8.builds == 1
    assert report.selected_plan == "int8"
    assert report.candidate("int8").race.gate_passed is True
    assert report.decision_time.spent_s <= 20.0 * 1.1


def test_a_near_free_build_does_not_scale_a_compiles_expected_cost_down():
    # A native plan builds in no time against its 0.05 s prior; the compile after it takes
    # what its prior says. Read through a mean of ratios, the near-free build scaled the
    # last plan's 6 s down to 1.5 s and started a build the budget had no room for.
    race = FakeRace()
    native = race.fake("native", 2e-3, setup_time_s=0.0, declared_prior=prior(1.5, 1.2, 1.8, 0.05))
    compiled = race.fake(
        "compiled", 1e-3, setup_time_s=1.0, declared_prior=prior(3.0, 2.0, 4.0, 1.0)
    )
    big = race.fake("big", 0.5e-3, setup_time_s=6.0, declared_prior=prior(5.0, 3.0, 8.0, 6.0))
    eager = race.fake("eager_fp32", 3e-3)
    report = select(race, eager, native, compiled, big, time_budget_s=6.0).report
    assert native.builds == 1 and compiled.builds == 1
    assert big.builds == 0
    assert report.candidate("big").not_built.startswith("no time left")
    assert 0.9 <= report.decision_time.cost_scale <= 1.0
    assert report.decision_time.spent_s <= 6.0


def failing_plan(race: FakeRace, name: str, precision: str, error_scale: float, **fields):
    """A cheap plan of ``precision`` whose outputs fail validation by ``error_scale``."""
    return race.fake(
        name, 1e-3, precision=precision, fail="validation", error_scale=error_scale, **fields
    )


def bf16_plans(race: FakeRace, error_scale: float):
    """Eager, an eager bf16 plan failing validation by ``error_scale``, a costly compiled
    bf16 plan and a compiled int8 one."""
    return (
        race.fake("eager_fp32", 3e-3),
        failing_plan(
            race, "native_bf16", "bf16", error_scale, declared_prior=prior(1.5, 1.2, 1.8, 0.05)
        ),
        *(
            race.fake(
                f"compiled_{precision}",
                1e-3,
                precision=precision,
                setup_time_s=5.0,
                declared_prior=prior(speedup, 1.5, 3.5, 5.0),
            )
            for precision, speedup in (("bf16", 2.5), ("int8", 2.4))
        ),
    )


def test_a_bf16_plan_far_over_its_limits_spares_the_builds_of_the_other_bf16_plans():
    race = FakeRace()
    eager, native, compiled, int8 = bf16_plans(race, error_scale=1.0)
    report = select(race, eager, native, compiled, int8, time_budget_s=None).report
    assert native.builds == 1 and report.candidate("native_bf16").status is Status.REJECTED
    assert compiled.builds == 0
    why = report.candidate("compiled_bf16").not_built
    assert why.startswith("its precision (bf16) fails validation on this model: native_bf16 ")
    assert "(bf16 limits)" in why and "plans computing in bf16 share its rounding" in why
    assert int8.builds == 1  # another precision: its own rounding, judged on its own

    # The rule is a prediction: exhaustive builds and judges the plan anyway.
    race = FakeRace()
    eager, native, compiled, int8 = bf16_plans(race, error_scale=1.0)
    report = select(race, eager, native, compiled, int8, exhaustive=True).report
    assert compiled.builds == 1 and report.candidate("compiled_bf16").not_built is None


def test_a_near_miss_of_the_bf16_limits_does_not_condemn_the_other_bf16_plans():
    # Just over the limit (rel_l2 about 1.3x it, whatever the weights: an error of 0.05x
    # the outputs' mean magnitude on every element): another plan's rounding may land
    # under it.
    torch.manual_seed(0)
    race = FakeRace()
    eager, native, compiled, int8 = bf16_plans(race, error_scale=0.05)
    report = select(race, eager, native, compiled, int8, time_budget_s=None).report
    reason = report.candidate("native_bf16").error.message
    assert "(bf16 limits)" in reason and "rel_l2" in reason
    assert compiled.builds == 1


def int8_plans(race: FakeRace, failing: str | None, others: tuple[str | None, ...]):
    """Eager, a cheap int8 plan declaring ``failing`` that fails validation far over its
    limits, and one costlier int8 plan per entry of ``others`` (its declaration)."""
    return (
        race.fake("eager_fp32", 3e-3),
        failing_plan(
            race,
            "first_int8",
            "int8",
            1.0,
            quantization=failing,
            declared_prior=prior(3.0, 2.0, 4.0, 0.5),
        ),
        *(
            race.fake(
                f"int8_{i}_{scheme}",
                1.5e-3,
                precision="int8",
                quantization=scheme,
                setup_time_s=2.0,
                declared_prior=prior(2.0, 1.5, 2.5, 2.0),
            )
            for i, scheme in enumerate(others)
        ),
    )


def test_a_static_int8_plan_far_over_its_limits_spares_only_the_other_static_int8_plans():
    race = FakeRace()
    eager, failed, static, dynamic, undeclared = int8_plans(
        race, "static", ("static", "dynamic", None)
    )
    report = select(race, eager, failed, static, dynamic, undeclared, time_budget_s=None).report
    assert failed.builds == 1 and static.builds == 0
    why = report.candidate(static.name).not_built
    assert why.startswith(
        "its precision (static int8) fails validation on this model: first_int8 measured "
    )
    assert "(int8 limits)" in why and "activation scales calibrated ahead of time" in why
    # Scales from each call, or no declaration: judged on their own.
    assert dynamic.builds == 1 and undeclared.builds == 1
    assert report.selected_plan in (dynamic.name, undeclared.name)


def test_an_int8_plan_failing_its_limits_condemns_nothing_unless_it_declares_static():
    for failing in ("dynamic", "weight_only", None):
        race = FakeRace()
        plans = int8_plans(race, failing, ("static", "dynamic"))
        select(race, *plans, time_budget_s=None)
        assert [p.builds for p in plans[1:]] == [1, 1, 1], failing


def firm_budget_plans(race: FakeRace):
    """Eager, a plan whose build costs what its prior says, and one whose 6 s build fits a
    10-11 s budget only if it takes no longer than expected."""
    return (
        race.fake("eager_fp32", 3e-3),
        race.fake("first", 1e-3, setup_time_s=1.0, declared_prior=prior(3.0, 2.0, 4.0, 1.0)),
        race.fake("big", 0.5e-3, setup_time_s=6.0, declared_prior=prior(5.0, 3.0, 8.0, 6.0)),
    )


def test_a_budget_the_user_set_starts_no_build_that_could_run_it_over():
    race = FakeRace()
    eager, first, big = firm_budget_plans(race)
    report = select(race, eager, first, big, time_budget_s=10.0).report
    assert first.builds == 1 and big.builds == 0
    why = report.candidate("big").not_built
    assert why.startswith("no time left: its build and first calls are expected to take 6.")
    assert "(up to 9." in why and "the budget is firm)" in why
    assert report.decision_time.spent_s <= 10.0

    # dlopt's own budget is no promise: the same build, with about as much time, is started.
    race = FakeRace()
    eager, first, big = firm_budget_plans(race)
    report = select(race, eager, first, big, time_budget_s="auto").report
    assert report.decision_time.budget_rule == "auto"
    assert 10.0 <= report.decision_time.budget_s <= 11.0
    assert big.builds == 1 and report.selected_plan == "big"


def test_a_plan_that_often_fails_validation_is_built_after_one_as_good_that_passes():
    race = FakeRace()
    order: list[str] = []
    flaky = Prior(2.0, 1.5, 3.0, 1.0, "the test's", pass_rate=0.25)
    optimizer = race.optimizer(
        race.fake("eager_fp32", 3e-3),
        race.fake("flaky", 1.5e-3, declared_prior=flaky),
        race.fake("steady", 1.5e-3, declared_prior=prior(2.0, 1.5, 3.0, 1.0)),
        time_budget_s=None,
    )
    built = [lambda e: order.append(e.candidate) if e.kind.value == "candidate_built" else None]
    optimizer.with_policy(optimizer.policy, observers=built).select_signature(Tiny().eval(), X)
    assert order == ["eager_fp32", "steady", "flaky"]
    assert flaky.value == pytest.approx(0.25 * prior(2.0, 1.5, 3.0, 1.0).value)
    assert flaky.describe() == "2.00x [1.50, 3.00], ~1.0 s, passed 25%"
    with pytest.raises(ValueError, match="pass_rate must be a number in"):
        Prior(2.0, 1.5, 3.0, 1.0, pass_rate=1.5)


def test_your_own_selections_give_a_plan_the_share_of_them_it_passed_validation_in(tmp_path):
    import attrs

    from dlopt.cache.user_priors import user_priors

    def select_once(flaky_fails: bool):
        race = FakeRace()
        flaky = race.fake(
            "flaky", 1e-3, fail="validation" if flaky_fails else "none", error_scale=0.5
        )
        optimizer = race.optimizer(race.fake("eager_fp32", 3e-3), flaky)
        policy = attrs.evolve(optimizer.policy, plan_cache_dir=str(tmp_path))
        # A new Tiny has new weights: a new key, a new record.
        return optimizer.with_policy(policy).select_signature(Tiny().eval(), X).report

    for fails in (False, True, False, True):
        select_once(fails)
    timing = select_once(False).decision_time
    priors = user_priors(str(tmp_path), timing.machine_class, timing.mix_kind)
    flaky = priors["flaky"]
    assert flaky.pass_rate == pytest.approx(3 / 5)
    assert "models, failed validation in 2 more (records " in flaky.source
    assert flaky.source.startswith("your evidence: 3 selection(s) on ")


def static_int8_plans(race: FakeRace, scout_passes: float):
    """Eager, a leader confirmed at about 3x, a cheap static int8 plan that cannot beat
    it (its prior's optimistic bound is 2.2x; it passes validation on ``scout_passes`` of
    models) and fails far over its limits here, and a costly static int8 plan expected
    ahead of the leader."""
    return (
        race.fake("eager_fp32", 3e-3),
        race.fake("leader", 1e-3, declared_prior=prior(3.0, 2.0, 4.0, 0.5)),
        failing_plan(
            race,
            "cheap_static",
            "int8",
            1.0,
            quantization="static",
            declared_prior=Prior(1.6, 1.2, 2.2, 0.5, "the test's", pass_rate=scout_passes),
        ),
        race.fake(
            "costly_static",
            0.8e-3,
            precision="int8",
            quantization="static",
            setup_time_s=5.0,
            declared_prior=Prior(3.5, 2.0, 5.0, 5.0, "the test's", pass_rate=0.4),
        ),
    )


def test_a_cheap_plan_expected_to_lose_is_built_when_its_failure_would_spare_a_costly_one():
    race = FakeRace()
    eager, leader, cheap, costly = static_int8_plans(race, scout_passes=0.4)
    report = select(race, eager, leader, cheap, costly, time_budget_s="auto").report
    assert cheap.builds == 1 and report.candidate("cheap_static").status is Status.REJECTED
    why = report.candidate("cheap_static").prior.built_to_test
    assert why.startswith("its rounding (static int8), shared by costly_static: its failure")
    assert costly.builds == 0
    assert report.candidate("costly_static").not_built.startswith(
        "its precision (static int8) fails validation on this model: cheap_static measured "
    )
    assert report.selected_plan == "leader"

    # A plan that always passes says nothing of the other's rounding: it is not built,
    # and the costly plan is.
    race = FakeRace()
    eager, leader, cheap, costly = static_int8_plans(race, scout_passes=1.0)
    report = select(race, eager, leader, cheap, costly, time_budget_s="auto").report
    assert cheap.builds == 0
    assert report.candidate("cheap_static").not_built.startswith("its prior is at most 2.20x")
    assert costly.builds == 1 and report.candidate("costly_static").prior.built_to_test is None


def test_nan_on_a_screening_call_rejects_the_plan_and_confirms_nothing():
    """A plan that answers NaN once validated used to earn a screened speedup from those
    answers, and the plans that speedup spared were never built."""
    race = FakeRace()
    fast = race.fake(
        "fast", 1e-3, declared_prior=prior(3.0, 2.0, 4.0, 0.5), fail="nonfinite", fail_after_calls=1
    )
    hopeless = race.fake("hopeless", 2.5e-3, declared_prior=prior(1.1, 0.9, 1.3, 5.0))
    decision = select(race, race.fake("eager_fp32", 3e-3), fast, hopeless, time_budget_s=None)
    report = decision.report
    rejected = report.candidate("fast")
    assert rejected.status is Status.REJECTED
    assert rejected.error.message.startswith("screening: ")
    assert "non-finite" in rejected.error.message
    assert rejected.prior.screening is None
    assert hopeless.builds == 1  # nothing was confirmed, so nothing was spared
    assert report.selected_plan in ("eager_fp32", "hopeless")


def test_where_no_prior_speaks_one_plan_of_each_family_is_built_before_a_second_of_any():
    # An LSTM tagger's mix has no row in the table: every prior is the unknown one, and
    # by cost alone one compiler's variants came first and took the budget.
    race = FakeRace()
    order: list[str] = []
    plans = [
        race.fake("compiled_a", 2e-3),
        race.fake("compiled_b", 2e-3),
        race.fake("compiled_c", 2e-3),
        race.fake("int8_dynamic", 1e-3, precision="int8", quantization="dynamic"),
        race.fake("bf16_plan", 2e-3, precision="bf16"),
    ]
    optimizer = race.optimizer(race.fake("eager_fp32", 3e-3), *plans)
    built = [lambda e: order.append(e.candidate) if e.kind.value == "candidate_built" else None]
    optimizer.with_policy(optimizer.policy, observers=built).select_signature(Tiny().eval(), X)
    assert order == [
        "eager_fp32",
        "compiled_a",
        "int8_dynamic",
        "bf16_plan",
        "compiled_b",
        "compiled_c",
    ]


def test_a_race_with_room_for_few_keeps_the_unknown_plans_whose_first_calls_ran_fastest():
    # No prior speaks for any plan and the race has room for the reference and two
    # challengers: what each plan's first calls measured against the reference's ranks
    # them (by their given order, the fast plan, registered last, was left out).
    race = FakeRace()
    slow = [
        race.fake(f"slow_{i}", 0.09, precision="int8", quantization="weight_only") for i in range(4)
    ]
    fast = race.fake("fast", 0.02, precision="int8", quantization="dynamic")
    report = select_slow(race, 0.1, *slow, fast, time_budget_s=16.0)
    kept_out = [c for c in report.candidates if c.not_raced]
    assert kept_out, "the race had room for every plan: the test's budget is too large"
    assert report.selected_plan == "fast"
    for cand in kept_out:
        assert cand.name.startswith("slow_")
        assert "was less promising (its first calls ran 0." in cand.not_raced, cand.not_raced


def test_a_placeholder_cost_is_not_read_as_a_cheaper_build_after_a_cheap_one():
    # No prior speaks: an FX rewrite built in 0.03 s against the unknown prior's 3 s read
    # every later build as four times cheaper, and an Inductor compile expected at 1 s
    # took 4.3 s of an 11 s budget (an LSTM tagger, AVX2).
    race = FakeRace()
    cheap = race.fake("rewrite", 8e-3, setup_time_s=0.03)
    compile_ = race.fake("compile", 8e-3, setup_time_s=4.3, precision="bf16")
    report = select_slow(race, 10e-3, cheap, compile_, time_budget_s=6.0)
    assert cheap.builds == 1 and compile_.builds == 0
    assert "expected to take 3.0 s" in report.candidate("compile").not_built
    assert report.decision_time.spent_s <= 6.0 * 1.15


def test_a_private_plan_no_prior_speaks_for_is_explored_once_where_a_cache_keeps_its_record(
    tmp_path, monkeypatch
):
    # The automatic budget has no room for it beside a costly leader; with no plan cache
    # it is left out, as before. With one it is built and raced once, and its record is
    # its prior from then on: a plan never built would never get one.
    import attrs

    import dlopt.evidence.machine_load as machine_load

    # Other processes on the test machine must not make the first race no evidence.
    monkeypatch.setattr(machine_load, "others_cpus", lambda start, end: None)

    def select_private(cache_dir):
        race = FakeRace()
        leader = race.fake("leader", 5e-3, setup_time_s=8.0, declared_prior=prior(2, 1.5, 3, 8))
        private = race.fake("private", 4e-3, setup_time_s=2.0, precision="bf16")
        optimizer = race.optimizer(
            race.fake("eager_fp32", 10e-3), leader, private, time_budget_s="auto"
        )
        optimizer = optimizer.with_policy(attrs.evolve(optimizer.policy, plan_cache_dir=cache_dir))
        return optimizer.select_signature(SlowTiny(race.clock, 10e-3).eval(), X).report

    without = select_private(None).candidate("private")
    assert without.not_built is not None and without.not_built.startswith("no time left")
    first = select_private(str(tmp_path))
    assert first.candidate("private").race.speedup_vs_reference is not None
    assert first.selected_plan == "private"
    again = select_private(str(tmp_path)).candidate("private")
    assert again.prior.source.startswith("your evidence: 1 selection(s)")


def test_a_model_that_spends_its_call_in_an_lstm_is_a_recurrent_mix():
    from dlopt.pipeline.ground_truth import operator_mix

    class Tagger(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm = torch.nn.LSTM(16, 64, num_layers=2, batch_first=True)
            self.head = torch.nn.Linear(64, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.lstm(x)[0])

    frames = torch.randn(2, 24, 16)
    reference = types.SimpleNamespace(
        cases=[types.SimpleNamespace(args=(frames,), kwargs={})], calling_context=torch.no_grad
    )
    mix = operator_mix(Tagger().eval(), reference)
    assert mix.kind == "recurrent", mix.describe()
    assert "recurrent" in mix.describe()
    assert OperatorMix(recurrent=0.3, conv=0.5, other=0.2).kind == "conv"


def test_the_automatic_budget_is_larger_where_no_prior_speaks_for_any_plan():
    from dlopt.settings.policy import EXPLORING_BUDGET_FACTOR

    known = FakeRace()
    with_prior = known.fake("fast", 5e-3, declared_prior=prior(2.0, 1.5, 3.0, 0.5))
    budget = select_slow(known, 10e-3, with_prior, time_budget_s="auto").decision_time.budget_s
    unknown = FakeRace()
    exploring = select_slow(unknown, 10e-3, unknown.fake("fast", 5e-3), time_budget_s="auto")
    assert exploring.decision_time.budget_s == pytest.approx(budget * EXPLORING_BUDGET_FACTOR)
    assert EXPLORING_BUDGET_FACTOR > 1


def test_the_race_may_run_a_tenth_of_the_budget_past_its_seconds_to_reach_its_least_rounds(
    monkeypatch,
):
    from dlopt.pipeline import measure

    seen = []
    real = measure.run_race

    def run_race(*args, **kwargs):
        seen.append((kwargs.get("min_rounds_ceiling_s"), kwargs["policy"].max_time_s))
        return real(*args, **kwargs)

    monkeypatch.setattr(measure, "run_race", run_race)
    race = FakeRace()
    fast = race.fake("fast", 1e-3, setup_time_s=0.1, declared_prior=prior(2.0, 1.5, 3.0, 0.1))
    select(race, race.fake("eager_fp32", 3e-3), fast, time_budget_s=10.0)
    ceiling, race_s = seen[-1]  # the selection's race (a screening may come before it)
    assert ceiling == pytest.approx(race_s + 0.1 * 10.0, abs=0.05)
    seen.clear()
    again = FakeRace()
    select(again, again.fake("eager_fp32", 3e-3), again.fake("fast", 1e-3), exhaustive=True)
    assert seen[-1][0] is None  # no budget: nothing to run past
