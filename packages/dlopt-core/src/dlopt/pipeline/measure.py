"""Stage 4, measure: race every surviving plan against the reference in interleaved rounds."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import attrs

from dlopt.contract.provider import Role
from dlopt.errors import DloptError, PlanCall, ReferenceCheckError
from dlopt.events import Event, EventKind
from dlopt.measurement import MeasurementPolicy, RaceResult, run_race
from dlopt.measurement.sequential import KnownSpread
from dlopt.pipeline.raced_calls import LastOutput, checked_calls, output_checks
from dlopt.pipeline.state import CandidateState, SelectionContext, StageError
from dlopt.selection.throughput import P99, samples_for_quantile_bound
from dlopt.validation import (
    ReferenceOutputs,
)
from dlopt.vocabulary import Objective, Stage, Verdict

#: Seconds kept for what follows the race (checks, the serving check, the report).
FINISH_RESERVE_S = 1.0
#: The least share of the time budget the race gets, however long the builds took: enough
#: for its first rounds, so a fast plan built late can still be confirmed.
MIN_RACE_SHARE = 0.1
#: The share of the time budget the race may run past its seconds to reach its least
#: rounds (``MeasurementPolicy.min_rounds``) when they run slower than priced: a busy
#: machine's decision still ends within 1.15x its budget.
MIN_ROUNDS_OVERRUN_SHARE = 0.1
#: The race as the schedule prices it (:meth:`RacePrice.plan_race_s`): each plan warms
#: up, then races :data:`RACE_FIRST_ROUNDS` rounds (after which a plan clearly behind
#: leaves); the two leading plans then race :data:`RACE_DECIDING_ROUNDS` rounds more. A
#: round is, per plan and case, a settle (untimed calls) and a burst of the measurement
#: policy's ``timed_calls_per_burst`` (more for calls shorter than
#: ``burst_time_target_s``).
RACE_FIRST_ROUNDS = 3
RACE_DECIDING_ROUNDS = 6
#: Calls of a plan's warm-up a race is expected to take (it stops once latency stops
#: falling), at most the policy's ``warmup_max_time_s``.
RACE_WARMUP_CALLS = 10
#: Seconds a burst costs beside its calls (the quiet-wait, the bookkeeping).
RACE_BURST_OVERHEAD_S = 0.005
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


@attrs.frozen
class RacePrice:
    """What a race is expected to cost on one model, from the reference's seconds per
    call of each case (``case_call_s``) and the measurement ``policy``: what the schedule
    keeps from the builds for the race (:meth:`race_reserve_s`) and the least the race
    gets (:meth:`race_floor_s`)."""

    case_call_s: tuple[float, ...]
    policy: MeasurementPolicy

    def plan_race_s(
        self, rounds: int, speedup: float = 1.0, *, warm_up: bool = True, at_most: bool = False
    ) -> float:
        """Seconds one plan running ``speedup`` times the reference's speed is expected
        to spend in ``rounds`` rounds of the race (and its warm-up): per case and round, a
        settling call and a burst of ``timed_calls_per_burst`` calls (more for short
        calls, to last ``burst_time_target_s``), each with :data:`RACE_BURST_OVERHEAD_S`,
        and :data:`RACE_WARMUP_CALLS` of warm-up. ``at_most``: the longest the policy
        lets them run instead (a settle up to ``settle_time_s``, a warm-up up to
        ``warmup_max_calls``), each warm-up at most ``warmup_max_time_s``.

        Counted in calls of the model's own length, and bounded in time where the policy
        bounds them, so a slow model's race is not priced as a fast one's times its call:
        on mobilenet_v2 (AVX2) a 20 s budget built nothing but eager fp32 when its least
        race, priced at 31 calls of 238 ms per plan with a 1.5x margin, came to 23 s."""
        policy = self.policy
        warmup_calls = policy.warmup_max_calls if at_most else RACE_WARMUP_CALLS
        seconds = 0.0
        for reference_s in self.case_call_s:
            call_s = reference_s / speedup
            short = math.ceil(policy.burst_time_target_s / call_s) if call_s > 0 else 0
            burst = min(max(policy.timed_calls_per_burst, short), policy.max_calls_per_burst)
            settle_s = max(call_s, policy.settle_time_s) if at_most else call_s
            seconds += rounds * (settle_s + burst * call_s + RACE_BURST_OVERHEAD_S)
            if warm_up:
                seconds += min(warmup_calls * call_s, policy.warmup_max_time_s)
        return seconds

    def race_reserve_s(self, plans: int) -> float:
        """Seconds the race of ``plans`` plans (each at the reference's speed) and what
        follows it are expected to need."""
        first = plans * self.plan_race_s(RACE_FIRST_ROUNDS)
        deciding = 2 * self.plan_race_s(RACE_DECIDING_ROUNDS, warm_up=False)
        return FINISH_RESERVE_S + first + deciding

    def race_floor_s(self, speedup: float = 1.0) -> float:
        """The least the race gets, however long the builds took: what the reference and
        one challenger (``speedup`` times as fast: its prior's low bound, where one plan is
        asked about) may take at most through their warm-up and the race's first three
        rounds, which decide a clear gap (a close one needs more, and without them the
        baseline is kept). A leader confirmed in screening is confirmed again in the race
        rather than lost to it; the budget is overrun by at most this much."""
        first = RACE_FIRST_ROUNDS
        reference = self.plan_race_s(first, at_most=True)
        return reference + self.plan_race_s(first, max(speedup, 1.0), at_most=True)


def _run_race(
    plans: Sequence[CandidateState],
    recorders: dict[str, list[LastOutput]],
    reference: ReferenceOutputs,
    run: SelectionContext,
    policy: MeasurementPolicy,
    *,
    min_speedup: float,
    on_round: Callable[[int, RaceResult], None] | None = None,
    measure_alone: bool = False,
    allocator_report: bool = False,
    min_rounds_ceiling_s: float | None = None,
    known_spreads: Mapping[str, KnownSpread] | None = None,
) -> RaceResult:
    """The one call of :func:`dlopt.measurement.run_race` in a selection: ``plans`` (the
    reference first) through ``recorders``, in the workload's calling context, every
    output checked as it comes."""
    with reference.calling_context():
        return run_race(
            recorders,
            weights=[case.weight for case in reference.cases],
            baseline=plans[0].name,
            min_speedup=min_speedup,
            policy=policy,
            clock=run.clock,
            synchronize={c.name: run.synchronize(c.plan) for c in plans},
            on_round=on_round,
            should_continue=run.should_continue,
            case_names=[case.name for case in reference.cases],
            natives=[c.name for c in plans if c.role is Role.NATIVE],
            measure_alone=measure_alone,
            output_checks=output_checks(recorders),
            allocator_report=allocator_report,
            min_rounds_ceiling_s=min_rounds_ceiling_s,
            known_spreads=known_spreads,
        )


def screening_race(
    cand: CandidateState,
    reference_plan: CandidateState,
    reference: ReferenceOutputs,
    run: SelectionContext,
    cap_s: float,
    rounds: int,
) -> RaceResult:
    """A screening: ``rounds`` paired rounds of ``cand`` against the reference within
    ``cap_s`` seconds, a burst of four calls per case, no plan leaving early and nothing
    reported (:meth:`dlopt.pipeline.schedule.Schedule.screen` reads its speedup)."""
    measurement = run.policy.measurement
    policy = MeasurementPolicy(
        confidence=measurement.confidence,
        min_rounds=rounds,
        max_rounds=rounds,
        max_time_s=cap_s,
        warmup_max_calls=10,
        warmup_max_time_s=min(measurement.warmup_max_time_s, 0.5),
        warmup_leave_factor=None,
        timed_calls_per_burst=4,
        family_wise=False,
        drop_worse_than_leader=False,
        futility_confidence=None,
        bootstrap_resamples=0,
        record_page_faults=False,
        seed=measurement.seed,
        settle_allocator=measurement.settle_allocator,
        quiesce_max_s=measurement.quiesce_max_s,
    )
    plans = (reference_plan, cand)
    recorders = checked_calls(plans, reference)
    return _run_race(plans, recorders, reference, run, policy, min_speedup=1.0)


def race(
    candidates: list[CandidateState],
    reference: ReferenceOutputs,
    run: SelectionContext,
    *,
    race_floor_s: float = 0.0,
    allocator_report: bool = True,
    known_spreads: Mapping[str, KnownSpread] | None = None,
) -> RaceOutcome:
    """Measure every surviving plan against the reference (first and alive). Under a time
    budget the race gets what is left of it, and never less than ``race_floor_s``.
    ``allocator_report`` and ``known_spreads``: as :func:`dlopt.measurement.run_race`'s
    (off for a race nobody reports; a cache hit's probe reads its spread from the
    record)."""
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
        return _run_race(
            alive,
            recorders,
            reference,
            run,
            measurement,
            min_speedup=run.policy.constraints.min_speedup,
            on_round=on_round,
            measure_alone=run.policy.objective is Objective.MAX_THROUGHPUT,
            allocator_report=allocator_report,
            min_rounds_ceiling_s=min_rounds_ceiling(run, race_floor_s),
            known_spreads=known_spreads,
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


def race_seconds(run: SelectionContext, floor_s: float = 0.0) -> float | None:
    """What the race may take of the time budget: what is left of it less what follows
    the race, never under :data:`MIN_RACE_SHARE` of it nor under ``floor_s`` (``None``:
    no budget)."""
    left = run.seconds_left()
    if left is None or run.deadline_ns is None or run.started_ns is None:
        return None
    budget_s = (run.deadline_ns - run.started_ns) / 1e9
    return max(left - FINISH_RESERVE_S, MIN_RACE_SHARE * budget_s, floor_s)


def min_rounds_ceiling(run: SelectionContext, floor_s: float = 0.0) -> float | None:
    """How long the race may run to reach its least rounds when they run slower than
    priced (a busy machine slows every call): its seconds (:func:`race_seconds`) and
    :data:`MIN_ROUNDS_OVERRUN_SHARE` of the time budget besides, so a plan measured 100x
    faster is not kept out for want of the rounds that confirm it (``None``: no budget)."""
    cap = race_seconds(run, floor_s)
    if cap is None or run.deadline_ns is None or run.started_ns is None:
        return None
    return cap + MIN_ROUNDS_OVERRUN_SHARE * (run.deadline_ns - run.started_ns) / 1e9


def race_within_budget(
    measurement: MeasurementPolicy, run: SelectionContext, floor_s: float = 0.0
) -> MeasurementPolicy:
    """``measurement`` with its race budget no longer than :func:`race_seconds`."""
    cap = race_seconds(run, floor_s)
    if cap is None:
        return measurement
    if measurement.max_time_s is not None:
        return attrs.evolve(measurement, max_time_s=min(measurement.max_time_s, cap))
    ceiling = min(measurement.auto_budget_max_s, cap)
    return attrs.evolve(
        measurement,
        auto_budget_min_s=min(measurement.auto_budget_min_s, ceiling),
        auto_budget_max_s=ceiling,
    )
