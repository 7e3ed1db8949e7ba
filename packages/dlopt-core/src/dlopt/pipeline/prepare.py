"""Stage 3, prepare: build each probed plan (timed), call it once per case (timed) and validate it.

In the order :mod:`dlopt.pipeline.schedule` gives, skipping the plans it says cannot matter.

A candidate ends alive, unavailable (its probe said so) or rejected (a :class:`StageError`).
The user's model is checked after every plan's build and first calls; a change is undone.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

import attrs
import torch

from dlopt.contract.calling import inputs_of_kind
from dlopt.contract.provider import (
    BuiltPlan,
    PreparedCase,
    ProviderContext,
)
from dlopt.errors import (
    PlanCall,
    PlanNotApplicable,
    ProviderBuildError,
    ReferenceCheckError,
    SelectionCancelled,
)
from dlopt.events import Event, EventKind
from dlopt.measurement import (
    MemoryProbe,
    time_call,
)
from dlopt.pipeline.constraints import build_violation
from dlopt.pipeline.probe import probe_provider
from dlopt.pipeline.schedule import Schedule
from dlopt.pipeline.state import (
    CandidateState,
    SelectionContext,
    StageError,
    close_all,
    reference_failure,
)
from dlopt.platform.interrupt import Deadline, PastDeadline
from dlopt.platform.processes import boot_ticks, end_processes, started_since
from dlopt.platform.serialization import finite_or_none
from dlopt.plugins.boundary import check_built_plan
from dlopt.settings.policy import OptimizationPolicy
from dlopt.validation import (
    InputFingerprint,
    ModelGuard,
    ModelMutatedError,
    ReferenceOutputs,
    ValidationResult,
    copy_inputs,
    validate_outputs,
)
from dlopt.vocabulary import GradMode, Stage

log = logging.getLogger(__name__)

#: How the reason for a plan abandoned at the budget's deadline for builds begins.
BUILD_PAST_BUDGET = "its build ran past the budget"
#: How long the processes an abandoned build started get to end after SIGTERM.
ABANDONED_GRACE_S = 0.2


def prepare_plans(
    candidates: Sequence[CandidateState],
    model: torch.nn.Module,
    context: ProviderContext,
    reference: ReferenceOutputs,
    guard: ModelGuard,
    run: SelectionContext,
    schedule: Schedule | None = None,
) -> None:
    """Prepare every candidate (the reference first: if it cannot serve, nothing more is
    built). With a ``schedule`` the others go in its order, a plan it says cannot matter
    is not built (``not_built`` says why), a validation failure that condemns the plan's
    precision is noted for the plans after it, and a validated plan is screened when a
    build it could spare is next. ``run.should_continue`` is asked before each build; ``False``
    raises :class:`~dlopt.errors.SelectionCancelled` (the caller releases what was built).
    """
    order = schedule.order(candidates) if schedule is not None else list(candidates)
    for index, cand in enumerate(order):
        if run.should_continue is not None and not run.should_continue():
            raise SelectionCancelled(f"cancelled before {cand.name!r} was built; no plan was raced")
        context_of_plan = attrs.evolve(context, options=cand.options)
        if not _available(cand, context_of_plan, run):
            if cand.is_reference:
                raise ReferenceCheckError(reference_failure(cand))
            continue
        why = schedule.skip_reason(cand, order) if schedule is not None else None
        # A plan built before that could spare this build is screened first.
        if why is None and schedule is not None and schedule.screen_before(index, order, reference):
            why = schedule.skip_reason(cand, order)
        if why is not None:
            cand.not_built = why
            # A scout left out for time tested nothing.
            cand.built_to_test = None
            run.emit(Event(EventKind.CANDIDATE_SKIPPED, f"not built: {why}", candidate=cand.name))
            continue
        deadline = schedule.build_deadline_ns(cand, order) if schedule is not None else None
        _prepare(cand, model, context_of_plan, reference, guard, run, deadline)
        if cand.not_built is not None:
            continue
        if cand.is_reference and not cand.alive:
            raise ReferenceCheckError(reference_failure(cand))
        if schedule is None:
            continue
        schedule.built(cand)
        schedule.rejected(cand)


def _available(cand: CandidateState, context: ProviderContext, run: SelectionContext) -> bool:
    """Probe ``cand`` (kept on it); an unavailable plan is said so and goes no further."""
    run.stage(cand, Stage.PROBE)
    cand.status = probe_provider(cand.info, context)
    availability = cand.status.availability
    if not availability.available:
        run.emit(
            Event(
                EventKind.PROVIDER_UNAVAILABLE,
                availability.reason or "unavailable",
                candidate=cand.name,
            )
        )
    return availability.available


def _prepare(
    cand: CandidateState,
    model: torch.nn.Module,
    context: ProviderContext,
    reference: ReferenceOutputs,
    guard: ModelGuard,
    run: SelectionContext,
    deadline_ns: int | None = None,
) -> None:
    """Build (timed), first-call every case (timed), validate, check build limits: a
    probed, available candidate ends alive or rejected (``error``), or abandoned
    (``not_built``) when its build and first calls run past ``deadline_ns`` (on
    ``run.clock``).
    """
    assert cand.status is not None
    availability = cand.status.availability
    # Build gets what core knows: the inputs as plans are called with them, the
    # reference outputs and the probe's answer (no second probe, no second eager run).
    context = attrs.evolve(context, cases=prepared_cases(reference), availability=availability)
    memory_probe = MemoryProbe(run.target.device).start()
    outputs: list[Any] = []
    started_ns = run.clock.now_ns()
    try:
        with _watched(run, deadline_ns) as watch:
            run.stage(cand, Stage.BUILD)
            error = build(cand, model, context, guard, run, watch.armed)
            if error is None:
                run.stage(cand, Stage.FIRST_CALL)
                error = first_calls(cand, model, reference, guard, run, outputs, watch.armed)
    except PastDeadline:
        _abandon(cand, model, guard, run, started_ns, deadline_ns)
        return
    finally:
        cand.memory = memory_probe.stop()
        cand.device_memory_mb = _device_memory(cand.plan)
    if error is None:
        run.stage(cand, Stage.VALIDATION)
        cand.validation = validate_calls(cand, outputs, reference, run.policy)
        if not cand.validation.passed:
            error = StageError(Stage.VALIDATION, cand.validation.reason or "failed validation")
    if error is None:
        error = build_violation(
            run.policy.constraints,
            setup_s=cand.setup_s,
            first_calls_s=cand.first_calls_s,
            memory=cand.memory,
            device_memory_mb=cand.device_memory_mb,
        )
    if error is not None:
        run.reject(cand, error)
        return
    run.emit(
        Event(
            EventKind.CANDIDATE_VALIDATED,
            "passed validation on every case",
            candidate=cand.name,
            data={"setup_time_s": cand.setup_s, "first_call_time_s": sum(cand.first_calls_s)},
        )
    )


class _Unwatched:
    """No deadline: nothing is ever abandoned."""

    armed = staticmethod(contextlib.nullcontext)

    def __enter__(self) -> _Unwatched:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def _watched(run: SelectionContext, deadline_ns: int | None) -> Deadline | _Unwatched:
    """The watchdog of one plan's build and first calls (:class:`Deadline`, armed only
    while the plan's own code runs), or none without a deadline. Past the deadline it
    also ends the processes started since the build began: a compile waits on its
    compiler (Inductor's C++ compiles of the LSTM tagger's kernels ran 12 s past the
    deadline in one wait), and no raise reaches a thread blocked in that wait."""
    if deadline_ns is None:
        return _Unwatched()
    since = boot_ticks()
    return Deadline(
        run.clock.now_ns,
        deadline_ns,
        on_passed=lambda: end_processes(started_since(since), grace_s=ABANDONED_GRACE_S),
    )


def _abandon(
    cand: CandidateState,
    model: torch.nn.Module,
    guard: ModelGuard,
    run: SelectionContext,
    started_ns: int,
    deadline_ns: int | None,
) -> None:
    """``cand``'s build or first calls ran past the budget's deadline for builds: what it
    built is released, the model checked (and put back), and it is reported not built.
    Past the budget, its result could only have been raced by spending the race's
    reserve: the leader then loses to the reference for want of rounds."""
    assert deadline_ns is not None
    ran_s = (run.clock.now_ns() - started_ns) / 1e9
    had_s = max(deadline_ns - started_ns, 0) / 1e9
    close_all([cand])
    cand.plan = None
    # Inductor's compile-worker pool may be one of the processes ended: a later compile
    # in this process starts a fresh one rather than writing to a dead pipe.
    async_compile = sys.modules.get("torch._inductor.async_compile")
    if async_compile is not None:
        with contextlib.suppress(Exception):
            async_compile.shutdown_compile_workers()
    _model_problem(cand, model, guard, Stage.BUILD)  # a change is undone: not built anyway
    cand.not_built = (
        f"{BUILD_PAST_BUDGET}: abandoned after {ran_s:.1f} s, when {had_s:.1f} s was left "
        f"for it beside the race's reserve (a larger --time-budget leaves it more)"
    )
    run.emit(
        Event(EventKind.CANDIDATE_SKIPPED, f"not built: {cand.not_built}", candidate=cand.name)
    )


def build(
    cand: CandidateState,
    model: torch.nn.Module,
    context: ProviderContext,
    guard: ModelGuard,
    run: SelectionContext,
    armed: Callable[[], AbstractContextManager[None]] = contextlib.nullcontext,
) -> StageError | None:
    """Build the plan (timed as its setup cost) and check it at the plugin boundary.
    ``armed`` scopes the provider's own code (what a deadline may abandon)."""

    def provider_build() -> Any:
        with armed():
            return cand.info.provider.build(model, context)

    timed = PlanCall.of(
        lambda: time_call(provider_build, run.clock, run.synchronize(None)),
        passes=(ModelMutatedError,),
    )
    if timed.error is not None:
        cand.not_applicable = isinstance(timed.error, PlanNotApplicable)
        return _stage_failure(Stage.BUILD, timed.error, cand, model, guard)
    assert timed.value is not None  # time_call returns (seconds, value)
    cand.setup_s, built = timed.value
    # Only a real BuiltPlan is kept (everything later closes and reads it), and only once
    # its names, paths and values are checked at the plugin boundary.
    if isinstance(built, BuiltPlan):
        cand.plan = built
    problem = _model_problem(cand, model, guard, Stage.BUILD)
    if problem is not None:
        return problem
    try:
        check_built_plan(built, context, plan_name=cand.name, plugin=cand.info.plugin)
    except ProviderBuildError as exc:
        return StageError(Stage.BUILD, str(exc))
    run.emit(
        Event(
            EventKind.CANDIDATE_BUILT,
            f"built in {cand.setup_s:.3f}s",
            candidate=cand.name,
            data={"setup_time_s": cand.setup_s},
        )
    )
    return None


def first_calls(
    cand: CandidateState,
    model: torch.nn.Module,
    reference: ReferenceOutputs,
    guard: ModelGuard,
    run: SelectionContext,
    outputs: list[Any],
    armed: Callable[[], AbstractContextManager[None]] = contextlib.nullcontext,
) -> StageError | None:
    """Call the plan once per case (timed: lazy compilation lands here) on its own copy of
    the inputs, fingerprinted around the call; ``outputs`` receives one output per case.
    ``armed`` scopes the plan's own calls (what a deadline may abandon)."""
    plan = cand.plan
    assert plan is not None
    sync = run.synchronize(plan)

    def call(*args: Any, **kwargs: Any) -> Any:
        with armed():
            return plan(*args, **kwargs)

    def call_every_case() -> StageError | None:
        # In the workload's calling context, on inputs made in it: what is judged serves.
        with reference.calling_context():
            for case in reference.cases:
                # Its own copy: a plan that writes into its inputs must not change what
                # the plans judged after it see.
                args, kwargs = copy_inputs(case.args, case.kwargs)
                before = InputFingerprint.of(args, kwargs)
                seconds, out = time_call(lambda: call(*args, **kwargs), run.clock, sync)  # noqa: B023
                cand.first_calls_s.append(seconds)
                outputs.append(out)
                changed = before.changed_paths(args, kwargs)
                if changed:
                    return StageError(
                        Stage.FIRST_CALL,
                        f"the plan wrote into its inputs on case {case.name!r} (input "
                        f"{', '.join(changed)} changed): plans must treat their inputs as "
                        "read-only; copy an input before writing to it",
                    )
        return None

    called = PlanCall.of(call_every_case, passes=(ModelMutatedError,))
    if called.error is not None:
        return _stage_failure(Stage.FIRST_CALL, called.error, cand, model, guard)
    return called.value or _model_problem(cand, model, guard, Stage.FIRST_CALL)


def _model_problem(
    cand: CandidateState, model: torch.nn.Module, guard: ModelGuard, stage: Stage
) -> StageError | None:
    """The plan changed the user's model: put the weights back (or stop), and say so."""
    problem = guard.check(model, stage=stage.value, plan=cand.name)
    if problem is None:
        return None
    _restore(guard, model, problem)
    return StageError(stage, problem + " (the weights were restored)")


def _stage_failure(
    stage: Stage,
    exc: BaseException,
    cand: CandidateState,
    model: torch.nn.Module,
    guard: ModelGuard,
) -> StageError:
    message = str(exc) if isinstance(exc, ProviderBuildError) else f"{type(exc).__name__}: {exc}"
    # A plan can change the model and then fail: put the weights back too.
    problem = guard.check(model, stage=stage.value, plan=cand.name)
    if problem is not None:
        _restore(guard, model, problem)
        message += f" (and {problem}; the weights were restored)"
    return StageError(stage, message)


def _restore(guard: ModelGuard, model: torch.nn.Module, problem: str) -> None:
    """Undo a plan's change to the user's model, or stop the selection naming the plan."""
    try:
        guard.restore(model)
    except ModelMutatedError as exc:
        raise ModelMutatedError(f"{problem}; {exc}") from exc


def validate_calls(
    cand: CandidateState,
    outputs: Sequence[Any],
    reference: ReferenceOutputs,
    policy: OptimizationPolicy,
) -> ValidationResult:
    """Validate one output per workload case against the reference (errors as results)."""
    assert cand.plan is not None
    try:
        return ValidationResult.from_cases(
            validate_outputs(
                out,
                case,
                precision=cand.plan.precision,
                output_dtype=cand.plan.output_dtype,
                policy=policy.quality,
                case_name=case.name,
            )
            for out, case in zip(outputs, reference.cases)
        )
    except Exception as exc:
        # Outputs validation cannot even read (e.g. tensors without data) fail the check.
        return ValidationResult.rejected(f"checking the outputs raised {type(exc).__name__}: {exc}")


def prepared_cases(reference: ReferenceOutputs) -> tuple[PreparedCase, ...]:
    """Each case as a build sees it, on a private copy so a build cannot change the inputs
    the race and the validation use. Builds get ordinary tensors whatever the calling
    context (exporters and quantizers trace with them); calls get the context's kind."""
    prepared = []
    for case in reference.cases:
        args, kwargs = inputs_of_kind(GradMode.NO_GRAD, *copy_inputs(case.args, case.kwargs))
        prepared.append(PreparedCase(case.name, args, kwargs, case.outputs, case.weight))
    return tuple(prepared)


def _device_memory(plan: BuiltPlan | None) -> float | None:
    """The plan runtime's own device-memory figure (MiB), when it reports one."""
    if plan is None or plan.device_memory_mb is None:
        return None
    try:
        return finite_or_none(plan.device_memory_mb())
    except Exception:
        log.warning("reading the device memory of a plan failed", exc_info=True)
        return None
