"""The latency and throughput objectives on the fake clock: min_latency at batch 1, max_throughput over batch
sizes, and the latency budget checked with an upper confidence bound."""

from __future__ import annotations

import pytest
import torch

from dlopt import WorkloadProfile
from dlopt.evidence.report import report_from_json
from dlopt.settings.policy import DeploymentConstraints, OptimizationPolicy
from dlopt.testing.models import StructuredMLP as SmallNet

SIZES = (1, 2, 4, 8)


@pytest.fixture
def one_request() -> torch.Tensor:
    return torch.randn(1, 16, generator=torch.Generator().manual_seed(5))


def _budgeted(race, one_request, **limits):
    """Max-throughput over ``SIZES`` of the two plans of :func:`_plans` under ``limits``."""
    quick, wide = _plans(race)
    workload = WorkloadProfile.batched(one_request, batch_sizes=SIZES)
    return race.optimizer(
        quick,
        wide,
        objective="max_throughput",
        constraints=DeploymentConstraints(**limits),
        max_time_s=120.0,  # a p99 bound needs a few hundred calls per batch size
    ).select(SmallNet(), workload)


def _plans(race):
    """``quick`` is the fastest at batch 1; ``wide`` is slower there but its latency
    hardly grows with batch, so it serves the most items per second at batch 8."""
    quick = race.fake("eager_fp32", 2e-3, per_batch_scale={2: 1.9, 4: 3.8, 8: 7.6})
    wide = race.fake("wide", 3e-3, per_batch_scale={2: 1.05, 4: 1.1, 8: 1.2})
    return quick, wide


def test_min_latency_picks_the_plan_fastest_at_batch_1(race, one_request):
    quick, wide = _plans(race)
    workload = WorkloadProfile.batched(one_request, batch_sizes=SIZES)
    decision = race.optimizer(quick, wide, objective="min_latency").select(SmallNet(), workload)
    assert decision.selected_plan == "eager_fp32"
    assert decision.batch_size == 1
    # min_latency races batch 1 only.
    assert [c.name for c in decision.report.workload.cases] == ["batch_1"]
    assert decision.report.throughput is None


def test_max_throughput_picks_the_plan_fastest_at_large_batch(race, one_request):
    quick, wide = _plans(race)
    workload = WorkloadProfile.batched(one_request, batch_sizes=SIZES)
    decision = race.optimizer(quick, wide, objective="max_throughput").select(SmallNet(), workload)
    assert (decision.selected_plan, decision.batch_size) == ("wide", 8)
    report = decision.report
    assert report.batch_size == 8
    curve = {(p.plan, p.batch_size): p for p in report.throughput.points}
    assert set(curve) == {(plan, b) for plan in ("eager_fp32", "wide") for b in SIZES}
    wide_rates = [curve["wide", b].items_per_s for b in SIZES]
    assert wide_rates == sorted(wide_rates)  # throughput grows with batch for "wide"
    assert all(p.items_per_s_low <= p.items_per_s <= p.items_per_s_high for p in curve.values())
    assert "Selected wide at batch 8" in report.selection_reason
    # The served batch size and the curves survive the strict JSON round trip.
    again = report_from_json(report.to_json())
    assert again.batch_size == 8 and again.throughput == report.throughput


def test_a_budget_only_batch_1_meets_picks_batch_1(race, one_request):
    # quick: 2 ms at batch 1, 3.8 ms at 2; wide: 3 ms at 1. Only quick at batch 1 fits 2.5 ms.
    decision = _budgeted(race, one_request, max_p99_latency_ms=2.5)
    assert (decision.selected_plan, decision.batch_size) == ("eager_fp32", 1)
    admissible = [(p.plan, p.batch_size) for p in decision.report.throughput.points if p.admissible]
    assert admissible == [("eager_fp32", 1)]
    refused = next(
        p for p in decision.report.throughput.points if (p.plan, p.batch_size) == ("wide", 8)
    )
    assert "max_p99_latency_ms" in refused.budget_note and refused.over_budget > 0


def test_a_budget_nothing_meets_keeps_the_baseline_and_names_the_closest_miss(race, one_request):
    decision = _budgeted(race, one_request, max_latency_ms=1.0)
    assert (decision.selected_plan, decision.batch_size) == ("eager_fp32", 1)
    evidence = decision.report.throughput
    assert evidence.budget_met is False
    # The closest (plan, batch size) is quick at batch 1 (2 ms against 1 ms: ~100% over).
    assert evidence.closest_miss.startswith("eager_fp32 at batch 1: mean latency upper bound")
    assert "over max_latency_ms" in evidence.closest_miss
    assert "no plan met the budget" in decision.selection_reason
    assert "closest: eager_fp32 at batch 1" in decision.selection_reason


def test_the_budget_is_checked_with_an_upper_bound_not_the_point(race, one_request):
    # Batch 2 of "wide" averages just under the budget with a wide spread: its point meets
    # the budget, its upper confidence bound does not, so batch 2 is refused.
    eager = race.fake("eager_fp32", 8e-3, per_batch_scale={2: 2.0})
    wide = race.fake("wide", 5e-3, per_batch_scale={2: 1.98})
    wide.latency_s = race.jitter(5e-3, spread=0.4)
    workload = WorkloadProfile.batched(one_request, batch_sizes=(1, 2))
    decision = race.optimizer(
        eager,
        wide,
        objective="max_throughput",
        constraints=DeploymentConstraints(max_latency_ms=10.0),
    ).select(SmallNet(), workload)
    curve = {(p.plan, p.batch_size): p for p in decision.report.throughput.points}
    at_2 = curve["wide", 2]
    assert at_2.latency_ms <= 10.0 < at_2.latency_high_ms
    assert not at_2.admissible and "upper bound" in at_2.budget_note
    assert (decision.selected_plan, decision.batch_size) == ("wide", 1)


def test_max_throughput_needs_a_batched_workload(race, x):
    quick, wide = _plans(race)
    with pytest.raises(ValueError, match=r"WorkloadProfile\.batched"):
        race.optimizer(quick, wide, objective="max_throughput").select_signature(SmallNet(), x)


def test_the_batch_sizes_from_the_first_that_runs_out_of_memory_are_dropped(race, one_request):
    class Greedy(SmallNet):
        def forward(self, x, scale=1.0):  # type: ignore[override]
            if x.shape[0] >= 4:
                raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
            return super().forward(x, scale)

    quick, wide = _plans(race)
    workload = WorkloadProfile.batched(one_request, max_batch_size=8)
    assert workload.batch_sizes == (1, 2, 4, 8)
    decision = race.optimizer(quick, wide, objective="max_throughput").select(Greedy(), workload)
    evidence = decision.report.throughput
    assert evidence.batch_sizes == (1, 2)
    assert "out of memory at batch 4" in evidence.memory_note
    assert {p.batch_size for p in evidence.points} == {1, 2}


def test_a_budget_without_enough_measurements_for_its_bound_says_so(race, one_request):
    # A p99 bound at 95% over 4 batch sizes needs a few hundred calls per size: five
    # rounds do not give it, so nothing is admissible and the reason says what to raise.
    quick, wide = _plans(race)
    workload = WorkloadProfile.batched(one_request, batch_sizes=SIZES)
    decision = race.optimizer(
        quick,
        wide,
        objective="max_throughput",
        constraints=DeploymentConstraints(max_p99_latency_ms=100.0),
        max_rounds=5,
    ).select(SmallNet(), workload)
    assert (decision.selected_plan, decision.batch_size) == ("eager_fp32", 1)
    assert decision.report.throughput.budget_met is False
    assert "too few measurements for an upper bound of the p99 latency" in (
        decision.selection_reason
    )
    assert "raise MeasurementPolicy.max_time_s and max_rounds" in decision.selection_reason


@pytest.mark.parametrize(
    ("constraints", "expected"),
    [
        ({}, 15),  # the rounds the automatic budget is sized for, not the aggregate's stop
        ({"max_latency_ms": 5.0}, 15),
        ({"max_p99_latency_ms": 5.0}, 80),  # 477 samples for the p99 bound, 6 per round
    ],
)
def test_a_throughput_race_runs_the_rounds_its_decision_needs(constraints, expected):
    from types import SimpleNamespace

    from dlopt.pipeline.measure import _throughput_min_rounds

    policy = OptimizationPolicy(
        objective="max_throughput", constraints=DeploymentConstraints(**constraints)
    )
    assert _throughput_min_rounds(SimpleNamespace(policy=policy), 6) == expected
