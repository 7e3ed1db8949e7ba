"""Stage 6, choose: the served plan by the selection rules, confirmed by a fresh validated call."""

from __future__ import annotations

from collections.abc import Sequence

from dlopt.contract.provider import (
    Role,
)
from dlopt.errors import ReferenceCheckError
from dlopt.measurement import (
    CandidateMeasurement,
    RaceResult,
    RatioInterval,
)
from dlopt.pipeline.checks import fresh_calls_check
from dlopt.pipeline.state import CandidateState, SelectionContext, StageError
from dlopt.selection.rules import Costs, SelectionOutcome, choose
from dlopt.selection.throughput import (
    P99,
    BatchPoint,
    LatencyBudget,
    check_budget,
    choose_throughput,
    mean_upper_bound,
    quantile_upper_bound,
    rate_interval,
)
from dlopt.settings.policy import DeploymentConstraints, OptimizationPolicy
from dlopt.validation import (
    ReferenceOutputs,
)
from dlopt.vocabulary import Objective, Stage, StopReason


def choose_served(
    candidates: list[CandidateState],
    result: RaceResult,
    expected_calls: int | None,
    reference: ReferenceOutputs,
    run: SelectionContext,
    batch_sizes: Sequence[int] | None = None,
) -> SelectionOutcome:
    """Choose, then run the chosen plan once more per case on fresh copies of the inputs
    and validate it; a plan that fails is rejected and the choice is made again.

    ``batch_sizes``: a batched workload's batch size per case (the throughput objective
    needs them)."""
    while True:
        if run.policy.objective is Objective.MAX_THROUGHPUT:
            outcome = _choose_throughput(candidates, result, run.policy, batch_sizes or (1,))
        else:
            outcome = _choose(candidates, result, expected_calls, run.policy)
        chosen = next(c for c in candidates if c.name == outcome.selected)
        chosen.final_check = fresh_calls_check(chosen, reference, run)
        if chosen.final_check.passed:
            return outcome
        message = f"a fresh call after the race failed validation: {chosen.final_check.reason}"
        if chosen.is_reference:
            raise ReferenceCheckError(f"the reference plan {chosen.name!r}: {message}")
        run.reject(chosen, StageError(Stage.REVALIDATION, message))


def _choose(
    candidates: list[CandidateState],
    result: RaceResult,
    expected_calls: int | None,
    policy: OptimizationPolicy,
) -> SelectionOutcome:
    eligible = []
    unmeasured = []
    for cand in candidates:
        if not cand.alive:
            continue
        steady = result.candidate(cand.name).weighted_mean_ms
        if steady is None and not cand.is_reference:
            unmeasured.append(cand.name)
            continue
        eligible.append(
            Costs(
                cand.name,
                cand.setup_s or 0.0,
                sum(cand.first_calls_s),
                steady,
                first_call_count=len(cand.first_calls_s),
                peak_memory_mb=cand.memory.mb if cand.memory is not None else None,
            )
        )
    reference = candidates[0].name

    def steady_speedup(name: str, against: str) -> RatioInterval | None:
        if against == reference:
            return result.candidate(name).speedup_vs_baseline
        return result.paired_speedup(name, against)

    return choose(
        objective=policy.objective,
        min_speedup=policy.constraints.min_speedup,
        expected_calls=expected_calls,
        eligible=eligible,
        steady_speedup=steady_speedup,
        confidence=result.confidence,
        unmeasured=unmeasured,
        budget_note=result.budget_overrun()
        if result.stop_reason == StopReason.TIME_BUDGET
        else None,
        reference=reference,
        natives=[c.name for c in candidates if c.role is Role.NATIVE],
        indifference_zone=policy.measurement.indifference_zone,
    )


def latency_budgets(constraints: DeploymentConstraints) -> list[LatencyBudget]:
    """The latency budgets per call the throughput objective checks (mean, then p99)."""
    budgets = []
    if constraints.max_latency_ms is not None:
        budgets.append(LatencyBudget("mean", constraints.max_latency_ms))
    if constraints.max_p99_latency_ms is not None:
        budgets.append(LatencyBudget("p99", constraints.max_p99_latency_ms))
    return budgets


def batch_points(
    measured: CandidateMeasurement,
    batch_sizes: Sequence[int],
    result: RaceResult,
    budgets: Sequence[LatencyBudget],
) -> list[BatchPoint]:
    """One plan's throughput curve, each point checked against every budget with upper
    bounds at alpha split over the plan's batch sizes (Bonferroni: its best admissible
    size is chosen among them)."""
    policy = result.policy
    alpha = policy.alpha / max(1, len(batch_sizes))
    points = []
    for index, size in enumerate(batch_sizes):
        stats = measured.cases[index] if index < len(measured.cases) else None
        means = (
            [m for m in measured.case_round_means_ms[index] if m is not None]
            if index < len(measured.case_round_means_ms)
            else []
        )
        mean_ms = stats.mean_ms if stats is not None else None
        high = mean_upper_bound(means, alpha, policy.min_rounds, policy.max_rounds)
        scores = (
            measured.case_round_scores[index] if index < len(measured.case_round_scores) else ()
        )
        rate, rate_low, rate_high = rate_interval(
            size, scores, alpha, policy.min_rounds, policy.max_rounds
        )
        samples = stats.samples_ms if stats is not None and stats.samples_ms else ()
        point = BatchPoint(
            plan=measured.name,
            batch_size=size,
            case=index,
            latency_ms=mean_ms,
            latency_high_ms=high,
            p99_ms=stats.p99_ms if stats is not None else None,
            p99_high_ms=quantile_upper_bound(samples, P99, alpha),
            items_per_s=rate,
            items_per_s_low=rate_low,
            items_per_s_high=rate_high,
        )
        for budget in budgets:
            point = check_budget(point, budget)
            if not point.admissible:
                break
        points.append(point)
    return points


def _choose_throughput(
    candidates: list[CandidateState],
    result: RaceResult,
    policy: OptimizationPolicy,
    batch_sizes: Sequence[int],
) -> SelectionOutcome:
    budgets = latency_budgets(policy.constraints)
    reference = candidates[0].name
    points = {
        cand.name: batch_points(result.candidate(cand.name), batch_sizes, result, budgets)
        for cand in candidates
        if cand.alive
    }
    index = {size: i for i, size in enumerate(batch_sizes)}

    def gain(name: str, size: int, against: str, against_size: int) -> RatioInterval | None:
        latency = result.case_speedup(
            (name, index[size]), (against, index[against_size]), family=len(batch_sizes)
        )
        scale = size / against_size

        def scaled(value: float | None) -> float | None:
            return None if value is None else value * scale

        return RatioInterval(
            scaled(latency.point),
            scaled(latency.low),
            scaled(latency.high),
            latency.confidence,
            f"throughput ratio: {size}/{against_size} x latency speedup ({latency.method})",
            latency.rounds,
            latency.per_look_confidence,
        )

    outcome = choose_throughput(
        points=points,
        baseline=reference,
        gain=gain,
        min_speedup=policy.constraints.min_speedup,
        confidence=result.confidence,
        budget=budgets[-1] if budgets else None,
    )
    return SelectionOutcome(
        outcome.selected, outcome.baseline, outcome.reason, (), {}, reference, throughput=outcome
    )
