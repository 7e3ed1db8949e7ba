"""Stage 5, checks after the race: the model is unchanged and every survivor's outputs pass again.

A plan is served only if it was correct on the calls it was judged on: the outputs of
its last measured calls (:func:`revalidate`) and one fresh call per case for the chosen
plan (:func:`fresh_calls_check`, run by :mod:`dlopt.pipeline.choose`). How the chosen plan
will be served is checked last (:func:`serving_check`: the raced signatures, and a
held-out batch size for a plan that declares dynamic shapes).
"""

from __future__ import annotations

from typing import Any

import torch

from dlopt.contract.provider import BuiltPlan
from dlopt.errors import PlanCall, ReferenceCheckError
from dlopt.measurement.results import RaceResult
from dlopt.pipeline.measure import RaceOutcome
from dlopt.pipeline.prepare import validate_calls
from dlopt.pipeline.state import CandidateState, SelectionContext, StageError
from dlopt.platform.tree import map_tensors
from dlopt.serving.evidence import RacedLatency, ServingEvidence, guard_words, unseen_words
from dlopt.serving.interface import interface_of, with_batch_free
from dlopt.serving.signature import (
    batch_sizes_along,
    describe,
    family_key,
    held_out_size,
    resize_batch,
    signature_key,
)
from dlopt.settings.workload import WorkloadProfile
from dlopt.validation import (
    ModelGuard,
    ModelMutatedError,
    ReferenceOutputs,
    ValidationResult,
    copy_inputs,
    validate_outputs,
)
from dlopt.validation.reference import ReferenceCase
from dlopt.validation.rounding import measure_fp32_rounding
from dlopt.vocabulary import Concurrency, Stage


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
    run: SelectionContext,
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
    cand: CandidateState, reference: ReferenceOutputs, run: SelectionContext
) -> ValidationResult:
    plan = cand.plan
    assert plan is not None
    sync = run.synchronize(plan)

    def call_every_case() -> list[Any]:
        outputs = []
        with reference.calling_context():
            for case in reference.cases:
                args, kwargs = copy_inputs(case.args, case.kwargs)
                outputs.append(plan(*args, **kwargs))
                if sync is not None:
                    sync()
        return outputs

    called = PlanCall.of(call_every_case)
    if called.error is not None:
        return ValidationResult.rejected(f"the call raised {called.describe()}")
    assert called.value is not None
    return validate_calls(cand, called.value, reference, run.policy)


def serving_check(
    cand: CandidateState,
    model: torch.nn.Module,
    reference: ReferenceOutputs,
    workload: WorkloadProfile,
    run: SelectionContext,
    race: RaceResult | None = None,
) -> ServingEvidence:
    """How the decision will serve the selected plan, checked where a promise needs it.

    The raced signatures are recorded; a plan that declares dynamic shapes is called on a
    held-out batch size (the first case's inputs at a size no case raced, rows repeated
    cyclically), and its output is validated against eager fp32 on the same inputs, with
    the plan's own limits. Only when that passes are unseen shapes of a raced case's
    family routed to it; otherwise they go where ``on_unseen_signature`` says. The
    plan's latency per raced case (``race``: the race that chose it) is what the
    production latency watch compares served calls with.
    """
    plan = cand.plan
    assert plan is not None
    traits = plan.serving
    raced = tuple(dict.fromkeys(describe(signature_key(c.args, c.kwargs)) for c in reference.cases))
    held_out: str | None = None
    families: tuple[str, ...] = ()
    if traits.dynamic_shapes:
        passed, held_out = _held_out(plan, model, reference, workload, run)
        if passed:
            families = tuple(
                dict.fromkeys(
                    describe(family_key(signature_key(c.args, c.kwargs))) for c in reference.cases
                )
            )
    policy = run.policy.on_unseen_signature
    return ServingEvidence(
        grad_mode=reference.grad_mode,
        concurrency=(
            Concurrency.SERIALIZED
            if traits.concurrency is Concurrency.PER_THREAD and plan.thread_runner is None
            else traits.concurrency
        ),
        any_grad_mode=traits.any_grad_mode,
        differentiable=traits.differentiable,
        dynamic_shapes=traits.dynamic_shapes,
        on_unseen_signature=policy,
        raced_signatures=raced,
        served_families=families,
        held_out_check=held_out,
        unseen=unseen_words(bool(families), policy),
        race_latency=raced_latency(cand.name, reference, race),
        guard=guard_words(run.policy.guard),
        batch_dim=_batch_dim(workload),
        raced_batch_sizes=_raced_batch_sizes(reference, _batch_dim(workload)),
        interface=with_batch_free(interface_of(reference.cases), _batch_dim(workload)),
    )


def _batch_dim(workload: WorkloadProfile) -> int:
    """The dimension requests are batched along (0 unless the workload says otherwise)."""
    return workload.batch_dim if workload.batch_sizes is not None else 0


def _raced_batch_sizes(reference: ReferenceOutputs, dim: int) -> tuple[int, ...]:
    """The batch size of each raced case along ``dim``: the size every tensor input with
    that dimension shares (a case whose tensors disagree there has none)."""
    sizes: set[int] = set()
    for case in reference.cases:
        found = batch_sizes_along(case.args, case.kwargs, dim)
        if len(found) == 1:
            sizes |= found
    return tuple(sorted(sizes))


def raced_latency(
    name: str, reference: ReferenceOutputs, race: RaceResult | None
) -> tuple[RacedLatency, ...]:
    """Plan ``name``'s measured latency on each raced case, by the case's signature (the
    first case of a signature speaks for it); empty when it was not measured."""
    if race is None or name not in {c.name for c in race.candidates}:
        return ()
    stats = {s.case: s for s in race.candidate(name).cases}
    found: dict[str, RacedLatency] = {}
    for case in reference.cases:
        latency = stats.get(case.name)
        if latency is None or latency.median_ms is None:
            continue
        signature = describe(signature_key(case.args, case.kwargs))
        high = max(latency.median_ms, latency.mean_high_ms or latency.median_ms)
        found.setdefault(signature, RacedLatency(signature, case.name, latency.median_ms, high))
    return tuple(found.values())


def _held_out(
    plan: BuiltPlan,
    model: torch.nn.Module,
    reference: ReferenceOutputs,
    workload: WorkloadProfile,
    run: SelectionContext,
) -> tuple[bool, str]:
    """``(passed, what happened)`` of the selected plan on a held-out batch size."""
    dim = _batch_dim(workload)
    raced: set[int] = set()
    for case in reference.cases:
        raced |= batch_sizes_along(case.args, case.kwargs, dim)
    size = held_out_size(raced)
    first = reference.cases[0]
    resized = resize_batch(first.args, first.kwargs, dim, size)
    if resized is None:
        return False, f"not checked: the inputs have no dimension {dim} to vary"
    args, kwargs = resized
    try:
        with reference.calling_context():
            expected = map_tensors(
                lambda t: t.detach().to("cpu", copy=True), model(*args, **kwargs)
            )
    except Exception as exc:
        return False, (
            f"not checked: eager fp32 does not take batch {size} along dim {dim} "
            f"({type(exc).__name__}: {exc})"
        )
    held = ReferenceCase(f"held-out batch {size}", args, kwargs, expected, ())
    if run.policy.quality.fp32_rounding_factor > 0:
        rounding, _ = measure_fp32_rounding(model, [(args, kwargs, expected)])
        held.fp32_rounding = rounding[0]
    sync = run.synchronize(plan)

    def call_once() -> Any:
        with reference.calling_context():
            own_args, own_kwargs = copy_inputs(args, kwargs)
            out = plan(*own_args, **own_kwargs)
            if sync is not None:
                sync()
        return out

    called = PlanCall.of(call_once)
    if called.error is not None:
        return False, f"failed: batch {size} raised {called.describe()}"
    result = validate_outputs(
        called.value,
        held,
        precision=plan.precision,
        output_dtype=plan.output_dtype,
        policy=run.policy.quality,
        case_name=held.name,
    )
    if not result.passed:
        return False, f"failed on batch {size}: {result.reason}"
    return True, f"passed on batch {size} (raced: {', '.join(map(str, sorted(raced)))})"
