"""Stage 5, checks after the race: the model is unchanged and every survivor's outputs pass again.

A plan is served only if it was correct on the calls it was judged on: the outputs of
its last measured calls (:func:`revalidate`) and one fresh call per case for the chosen
plan (:func:`fresh_calls_check`, run by :mod:`dlopt.pipeline.choose`).
"""

from __future__ import annotations

import torch

from dlopt.errors import PLAN_FAILURES, ReferenceCheckError
from dlopt.pipeline.prepare import validate_calls
from dlopt.pipeline.race import RaceOutcome
from dlopt.pipeline.state import CandidateState, Run, StageError
from dlopt.validation import (
    ModelGuard,
    ModelMutatedError,
    ReferenceOutputs,
    ValidationResult,
    copy_inputs,
)
from dlopt.vocabulary import Stage


def check_model_after_race(model: torch.nn.Module, guard: ModelGuard) -> None:
    """Builds and first calls are checked one plan at a time; a change made during the
    interleaved race cannot be pinned on one plan, and it makes every measurement (eager
    runs on the user's model) suspect: put the weights back and stop."""
    problem = guard.check(model, stage="measurement")
    if problem is None:
        return
    try:
        guard.restore(model)
        outcome = "the weights were restored"
    except ModelMutatedError as exc:
        outcome = f"the weights could not be restored: {exc}"
    raise ModelMutatedError(
        f"{problem.replace('the plan', 'a raced plan')}; {outcome}. Rerun with "
        "OptimizationPolicy(include=...) to find the plan that writes to the model"
    )


def revalidate(
    candidates: list[CandidateState],
    outcome: RaceOutcome,
    reference: ReferenceOutputs,
    run: Run,
) -> None:
    """Every survivor's output of its last measured call, per case, passes validation
    again: a plan is served only if it was correct on the calls it was judged on."""
    for cand in candidates:
        recorders = outcome.last_outputs.get(cand.name)
        if not cand.alive or recorders is None or not all(r.calls for r in recorders):
            continue  # not measured (a race without challengers runs nothing)
        cand.revalidation = validate_calls(
            cand, [r.output for r in recorders], reference, run.policy
        )
        if cand.revalidation.passed:
            continue
        message = (
            f"the outputs of its last measured calls failed validation: {cand.revalidation.reason}"
        )
        if cand.is_reference:
            raise ReferenceCheckError(
                f"the reference plan {cand.name!r} drifted during the race: {message}; "
                "the model is not deterministic across calls"
            )
        run.reject(cand, StageError(Stage.REVALIDATION, message))


def fresh_calls_check(
    cand: CandidateState, reference: ReferenceOutputs, run: Run
) -> ValidationResult:
    plan = cand.plan
    assert plan is not None
    sync = run.synchronize(plan)
    outputs = []
    try:
        with torch.inference_mode():
            for case in reference.cases:
                args, kwargs = copy_inputs(case.args, case.kwargs)
                outputs.append(plan(*args, **kwargs))
                if sync is not None:
                    sync()
    except PLAN_FAILURES as exc:
        return ValidationResult.rejected(f"the call raised {type(exc).__name__}: {exc}")
    return validate_calls(cand, outputs, reference, run.policy)
