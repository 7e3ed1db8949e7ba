"""Stage 6, choose: the served plan by the selection rules, confirmed by a fresh validated call."""

from __future__ import annotations

from dlopt.api.policy import OptimizationPolicy
from dlopt.errors import ReferenceCheckError
from dlopt.measurement import (
    RaceResult,
    RatioInterval,
)
from dlopt.pipeline.checks import fresh_calls_check
from dlopt.pipeline.state import CandidateState, Run, StageError
from dlopt.plugins.contract import (
    Role,
)
from dlopt.selection.rules import Costs, SelectionOutcome, choose
from dlopt.validation import (
    ReferenceOutputs,
)
from dlopt.vocabulary import Stage, StopReason


def choose_served(
    candidates: list[CandidateState],
    result: RaceResult,
    expected_calls: int | None,
    reference: ReferenceOutputs,
    run: Run,
) -> SelectionOutcome:
    """Choose, then run the chosen plan once more per case on fresh copies of the inputs
    and validate it; a plan that fails is rejected and the choice is made again."""
    while True:
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
