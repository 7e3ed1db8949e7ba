"""Stage 4, measure: race every surviving plan against the reference in interleaved rounds."""

from __future__ import annotations

import attrs

from dlopt.contract.provider import Role
from dlopt.errors import DloptError, PlanCall, ReferenceCheckError
from dlopt.events import Event, EventKind
from dlopt.measurement import (
    RaceResult,
    run_race,
)
from dlopt.pipeline.raced_calls import LastOutput, checked_calls, output_checks
from dlopt.pipeline.schedule import race_within_budget
from dlopt.pipeline.state import CandidateState, SelectionContext, StageError
from dlopt.selection.throughput import P99, samples_for_quantile_bound
from dlopt.validation import (
    ReferenceOutputs,
)
from dlopt.vocabulary import Objective, Stage, Verdict

#: The fewest rounds a throughput race under a mean-latency budget runs: the budget is
#: checked with an upper bound per batch size, which three rounds leave too wide to admit
#: anything near the budget.
BUDGET_MIN_ROUNDS = 10


def _throughput_min_rounds(run: SelectionContext, batch_sizes: int) -> int:
    """The rounds a throughput race runs before it may stop (within ``max_rounds``).

    Its stopping rule reads the race's aggregate, which is not the objective: the
    aggregate resolves in a few rounds while the pairwise throughput comparisons at
    single batch sizes (split over the batch sizes) are still too wide to clear the bar,
    and the baseline was then kept against a plan 1.5x faster. So it runs at least the
    rounds the automatic budget is sized for; a mean budget at least
    :data:`BUDGET_MIN_ROUNDS`; a p99 budget until its distribution-free upper bound exists
    at every batch size (each round times at least ``timed_calls_per_burst`` calls of a
    case)."""
    policy = run.policy.measurement
    constraints = run.policy.constraints
    rounds = max(policy.min_rounds, policy.auto_budget_rounds)
    if constraints.max_latency_ms is not None:
        rounds = max(rounds, BUDGET_MIN_ROUNDS)
    if constraints.max_p99_latency_ms is not None:
        needed = samples_for_quantile_bound(P99, policy.alpha / max(1, batch_sizes))
        rounds = max(rounds, -(-needed // policy.timed_calls_per_burst))
    return min(rounds, policy.max_rounds)


@attrs.frozen
class RaceOutcome:
    """The race and, per plan, the recorder of its last output on every case."""

    result: RaceResult
    last_outputs: dict[str, list[LastOutput]]


def race(
    candidates: list[CandidateState],
    reference: ReferenceOutputs,
    run: SelectionContext,
    *,
    race_floor_s: float = 0.0,
    allocator_report: bool = True,
) -> RaceOutcome:
    """Measure every surviving plan against the reference (first and alive). Under a time
    budget the race gets what is left of it, and never less than ``race_floor_s``.
    ``allocator_report``: as :func:`dlopt.measurement.run_race`'s (off for a race nobody
    reports)."""
    alive = [c for c in candidates if c.alive]
    recorders = checked_calls(alive, reference)

    def on_round(round_number: int, snapshot: RaceResult) -> None:
        run.emit(
            Event(
                EventKind.ROUND_FINISHED,
                f"round {round_number}",
                data={
                    "round": round_number,
                    "elapsed_s": snapshot.total_time_s,
                    "budget_s": snapshot.budget_s,
                    "leader": snapshot.leader,
                    "resolved": [
                        m.name
                        for m in snapshot.candidates
                        if m.verdict in (Verdict.FASTER, Verdict.NOT_FASTER, Verdict.DROPPED)
                    ],
                },
            )
        )

    measurement = race_within_budget(run.policy.measurement, run, race_floor_s)
    if run.policy.objective is Objective.MAX_THROUGHPUT:
        # The race's aggregate (summed cost per item over the batch sizes) is not the
        # objective: a plan behind on it may still have the best batch size, so no plan
        # leaves the rounds early on it.
        measurement = attrs.evolve(
            measurement,
            drop_worse_than_leader=False,
            warmup_leave_factor=None,
            min_rounds=_throughput_min_rounds(run, len(reference.cases)),
        )

    def race() -> RaceResult:
        with reference.calling_context():
            return run_race(
                recorders,
                weights=[case.weight for case in reference.cases],
                baseline=alive[0].name,
                min_speedup=run.policy.constraints.min_speedup,
                policy=measurement,
                clock=run.clock,
                synchronize={c.name: run.synchronize(c.plan) for c in alive},
                on_round=on_round,
                should_continue=run.should_continue,
                case_names=[case.name for case in reference.cases],
                natives=[c.name for c in alive if c.role is Role.NATIVE],
                measure_alone=run.policy.objective is Objective.MAX_THROUGHPUT,
                output_checks=output_checks(recorders),
                allocator_report=allocator_report,
            )

    raced = PlanCall.of(race, passes=(DloptError,))
    if raced.error is not None:
        # run_race records a failing challenger and goes on; only the baseline's own
        # error propagates: the reference cannot serve, so no decision can be made.
        raise ReferenceCheckError(
            f"the reference plan {alive[0].name!r} raised while being measured: "
            f"{raced.describe()}; the model must serve the workload inputs on "
            "every call: fix the model or the inputs"
        ) from raced.error
    result = raced.value
    assert result is not None
    run.emit(
        Event(
            EventKind.RACE_FINISHED,
            f"{result.rounds} rounds, stop: {result.stop_reason}",
            data={"rounds": result.rounds, "stop_reason": result.stop_reason.value},
        )
    )
    for cand in alive:
        measured = result.candidate(cand.name)
        if measured.verdict == Verdict.FAILED:
            run.reject(
                cand, StageError(Stage.MEASURE, measured.error or "failed during measurement")
            )
    return RaceOutcome(result, recorders)
