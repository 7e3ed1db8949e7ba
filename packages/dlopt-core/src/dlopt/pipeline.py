"""The stages of a selection and the working state of each candidate.

The optimizer wires these in order; each stage takes what the previous one produced and
records its own result on the candidates, with failures as values (a ``StageError`` on
the candidate), never as jumps:

    choose_plans -> prepare (probe -> build -> first calls -> validation -> build limits)
    -> race -> revalidate -> measured limits -> choose (+ final check) -> evidence

Only an unrecoverable state stops a selection by raising: the reference cannot serve
(``ReferenceCheckError``) or the user's model was changed for good (``ModelMutatedError``).
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import logging
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import torch

from dlopt.constraints import build_violation, measured_violation
from dlopt.errors import ConfigurationError, DloptError, ProviderBuildError, ReferenceCheckError
from dlopt.events import Event, EventKind
from dlopt.measurement import (
    Clock,
    MemoryProbe,
    PeakMemory,
    RaceResult,
    RatioInterval,
    run_race,
    time_call,
)
from dlopt.policy import OptimizationPolicy, check_plan_names, structure_options
from dlopt.providers.boundary import check_built_plan, check_plan_name
from dlopt.providers.contract import (
    BuiltPlan,
    ExecutionProvider,
    PreparedCase,
    ProviderContext,
    ProviderInfo,
    Role,
)
from dlopt.providers.loader import ProviderRegistry, ProviderStatus, probe_provider
from dlopt.report import StageError
from dlopt.selection import Costs, SelectionOutcome, choose
from dlopt.serialization import finite_or_none
from dlopt.target import ExecutionTarget
from dlopt.validation import (
    InputFingerprint,
    ModelGuard,
    ModelMutatedError,
    ReferenceOutputs,
    ValidationResult,
    copy_inputs,
    validate_outputs,
)
from dlopt.vocabulary import Stage, StopReason, Verdict
from dlopt.workload import WorkloadProfile

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------- state


@attrs.define(eq=False)
class CandidateState:
    """Working state of one candidate during a selection: what was built and measured."""

    info: ProviderInfo
    status: ProviderStatus | None = None
    plan: BuiltPlan | None = None
    options: Any = None
    setup_s: float | None = None
    first_calls_s: list[float] = attrs.field(factory=list)
    memory: PeakMemory | None = None
    device_memory_mb: float | None = None
    validation: ValidationResult | None = None
    #: After the race: the outputs of the plan's last measured call per case, validated.
    revalidation: ValidationResult | None = None
    #: The chosen plan only: one fresh call per case after the race, validated.
    final_check: ValidationResult | None = None
    error: StageError | None = None

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def role(self) -> Role:
        return Role.of(self.info.provider)

    @property
    def is_reference(self) -> bool:
        return self.role is Role.REFERENCE

    @property
    def alive(self) -> bool:
        return self.plan is not None and self.error is None


@attrs.frozen
class Run:
    """What every stage of one selection needs: the policy, the target, the clock and the
    event sink."""

    policy: OptimizationPolicy
    target: ExecutionTarget
    clock: Clock
    emit: Callable[[Event], None]
    #: Asked between warm-ups and rounds of the race; False ends the rounds.
    should_continue: Callable[[], bool] | None = None

    def synchronize(self, plan: BuiltPlan | None) -> Callable[[], None] | None:
        """What waits for a plan's queued work before a timer stops: the plan's own
        ``synchronize`` if it has one, else the target's torch device (CUDA)."""
        if plan is not None and plan.synchronize is not None:
            return plan.synchronize
        if self.target.is_cuda:
            return functools.partial(torch.cuda.synchronize, torch.device(self.target.device))
        return None

    def stage(self, cand: CandidateState, stage: str) -> None:
        """Say that ``cand`` enters ``stage`` (for progress displays)."""
        self.emit(Event(EventKind.STAGE_STARTED, stage, candidate=cand.name, data={"stage": stage}))

    def reject(self, cand: CandidateState, error: StageError) -> None:
        """Record ``error`` on ``cand``, release its plan (the reference's stays: it is
        needed to report), and say so."""
        cand.error = error
        if cand.plan is not None and not cand.is_reference:
            cand.plan.close()
        self.emit(
            Event(
                EventKind.CANDIDATE_REJECTED,
                f"{error.stage}: {error.message}",
                candidate=cand.name,
                data={"stage": error.stage.value},
            )
        )


# ---------------------------------------------------------------------------- plans


def choose_plans(
    registry: ProviderRegistry, explicit: Sequence[ExecutionProvider], policy: OptimizationPolicy
) -> list[CandidateState]:
    """The plans this selection races, reference first, with their options checked."""
    names = [check_plan_name(p.name, plugin="explicit") for p in explicit]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        # A dict keyed by name would keep the last one silently.
        raise ConfigurationError(
            f"providers= holds more than one provider named {', '.join(map(repr, repeated))}; "
            "plan names must be unique: rename one or pass only one"
        )
    # A typo in include/exclude would silently race other plans than the user meant.
    check_plan_names(policy, [*(i.name for i in registry.providers), *names])
    by_name = {p.name: ProviderInfo(p, plugin="explicit") for p in explicit}
    infos = [by_name.pop(info.name, info) for info in registry.providers]
    infos.extend(by_name.values())
    # The reference (eager fp32) always races, whatever include/exclude say, and first.
    roles = {i.name: _declared_role(i) for i in infos}
    chosen = [i for i in infos if roles[i.name] is Role.REFERENCE or policy.wants(i.name)]
    references = [i.name for i in chosen if roles[i.name] is Role.REFERENCE]
    if len(references) != 1:
        raise ConfigurationError(
            "no provider declares the reference role (core's eager_fp32 does): reinstall dlopt-core"
            if not references
            else f"more than one provider declares the reference role: "
            f"{', '.join(references)}; only one plan (eager fp32) can be the reference: "
            "a plugin's plan declares Role.NATIVE or Role.CHALLENGER"
        )
    chosen.sort(key=lambda i: roles[i.name] is not Role.REFERENCE)
    _check_plan_options(policy, chosen)
    return [CandidateState(info, options=plan_options(policy, info)) for info in chosen]


def plan_options(policy: OptimizationPolicy, info: ProviderInfo) -> Any:
    """The plan's options: the user's values for it, over the provider's defaults."""
    options_type = getattr(info.provider, "options_type", None)
    if options_type is None:
        return None
    return structure_options(options_type, policy.plan_options.get(info.name, {}), plan=info.name)


def _check_plan_options(policy: OptimizationPolicy, chosen: list[ProviderInfo]) -> None:
    """Options for a plan that is not raced, or that takes none, are a user's mistake."""
    by_name = {i.name: i for i in chosen}
    for name, values in policy.plan_options.items():
        info = by_name.get(name)
        if info is None:
            close = difflib.get_close_matches(name, list(by_name), n=3, cutoff=0.6)
            hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
            raise ConfigurationError(
                f"plan_options names {name!r}, which is not a plan of this race{hint} "
                f"(raced: {', '.join(by_name)})"
            )
        if getattr(info.provider, "options_type", None) is None and values:
            raise ConfigurationError(
                f"plan {name!r} takes no options, but plan_options gives it "
                f"{', '.join(map(repr, values))}"
            )


def _declared_role(info: ProviderInfo) -> Role:
    try:
        return Role.of(info.provider)
    except TypeError as exc:
        raise ConfigurationError(f"{exc} (plugin {info.plugin!r})") from None


# ---------------------------------------------------------------------------- prepare


def prepare(
    cand: CandidateState,
    model: torch.nn.Module,
    context: ProviderContext,
    reference: ReferenceOutputs,
    guard: ModelGuard,
    run: Run,
) -> None:
    """Probe, build (timed), first-call every case (timed), validate, check build limits.

    The candidate ends alive, unavailable (``status``) or rejected (``error``).
    """
    context = attrs.evolve(context, options=cand.options)
    run.stage(cand, "probe")
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
        return
    # Build gets what core knows: the inputs as plans are called with them, the
    # reference outputs and the probe's answer (no second probe, no second eager run).
    context = attrs.evolve(context, cases=prepared_cases(reference), availability=availability)
    memory_probe = MemoryProbe(run.target.device).start()
    try:
        run.stage(cand, "build")
        error = build(cand, model, context, guard, run)
        outputs: list[Any] = []
        if error is None:
            run.stage(cand, "first_call")
            error = first_calls(cand, model, reference, guard, run, outputs)
    finally:
        cand.memory = memory_probe.stop()
        cand.device_memory_mb = _device_memory(cand.plan)
    if error is None:
        run.stage(cand, "validation")
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


def build(
    cand: CandidateState,
    model: torch.nn.Module,
    context: ProviderContext,
    guard: ModelGuard,
    run: Run,
) -> StageError | None:
    """Build the plan (timed as its setup cost) and check it at the plugin boundary."""
    try:
        cand.setup_s, built = time_call(
            lambda: cand.info.provider.build(model, context), run.clock, run.synchronize(None)
        )
    except ModelMutatedError:
        raise
    except Exception as exc:
        return _stage_failure(Stage.BUILD, exc, cand, model, guard)
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
    run: Run,
    outputs: list[Any],
) -> StageError | None:
    """Call the plan once per case (timed: lazy compilation lands here) on its own copy of
    the inputs, fingerprinted around the call; ``outputs`` receives one output per case."""
    plan = cand.plan
    assert plan is not None
    sync = run.synchronize(plan)
    try:
        with torch.inference_mode():
            for case in reference.cases:
                # Its own copy: a plan that writes into its inputs must not change what
                # the plans judged after it see.
                args, kwargs = copy_inputs(case.args, case.kwargs)
                before = InputFingerprint.of(args, kwargs)
                seconds, out = time_call(lambda: plan(*args, **kwargs), run.clock, sync)  # noqa: B023
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
    except ModelMutatedError:
        raise
    except Exception as exc:
        return _stage_failure(Stage.FIRST_CALL, exc, cand, model, guard)
    return _model_problem(cand, model, guard, Stage.FIRST_CALL)


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
    exc: Exception,
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
                case.outputs,
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
    """Each case as plans see it, on a private copy so a build cannot change the inputs
    the race and the validation use."""
    prepared = []
    for case in reference.cases:
        args, kwargs = copy_inputs(case.args, case.kwargs)
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


def reference_failure(cand: CandidateState) -> str:
    """Why the reference plan cannot serve, for the error the user sees."""
    what = f"the reference plan {cand.name!r}"
    if cand.status is not None and not cand.status.availability.available:
        reason = cand.status.availability.reason or "no reason given"
        return f"{what} is unavailable: {reason}"
    if cand.error is not None:
        return f"{what} failed at {cand.error.stage}: {cand.error.message}"
    return f"{what} was not built"


# ---------------------------------------------------------------------------- race


class LastOutput:
    """One plan's call on one case, keeping the output of the latest call for revalidation."""

    __slots__ = ("args", "calls", "kwargs", "output", "plan")

    def __init__(self, plan: BuiltPlan, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.plan = plan
        self.args = args
        self.kwargs = kwargs
        self.output: Any = None
        self.calls = 0

    def __call__(self) -> Any:
        self.output = self.plan(*self.args, **self.kwargs)
        self.calls += 1
        return self.output


@attrs.frozen
class RaceOutcome:
    """The race and, per plan, the recorder of its last output on every case."""

    result: RaceResult
    last_outputs: dict[str, list[LastOutput]]


def race(
    candidates: list[CandidateState],
    reference: ReferenceOutputs,
    workload: WorkloadProfile,
    run: Run,
) -> RaceOutcome:
    """Measure every surviving plan against the reference (first and alive)."""
    alive = [c for c in candidates if c.alive]
    recorders = {
        cand.name: [LastOutput(cand.plan, case.args, case.kwargs) for case in reference.cases]  # type: ignore[arg-type]
        for cand in alive
    }

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

    try:
        with torch.inference_mode():
            result = run_race(
                recorders,
                weights=workload.weights,
                baseline=alive[0].name,
                min_speedup=run.policy.constraints.min_speedup,
                policy=run.policy.measurement,
                clock=run.clock,
                synchronize={c.name: run.synchronize(c.plan) for c in alive},
                on_round=on_round,
                should_continue=run.should_continue,
                case_names=[case.name for case in reference.cases],
                natives=[c.name for c in alive if c.role is Role.NATIVE],
            )
    except DloptError:
        raise
    except Exception as exc:
        # run_race records a failing challenger and goes on; only the baseline's own
        # error propagates: the reference cannot serve, so no decision can be made.
        raise ReferenceCheckError(
            f"the reference plan {alive[0].name!r} raised while being measured: "
            f"{type(exc).__name__}: {exc}; the model must serve the workload inputs on "
            "every call: fix the model or the inputs"
        ) from exc
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


def apply_measured_limits(candidates: list[CandidateState], result: RaceResult, run: Run) -> None:
    """Reject challengers whose steady-state latency breaks a deployment limit."""
    for cand in candidates:
        if not cand.alive or cand.is_reference:
            continue
        error = measured_violation(
            run.policy.constraints, result.candidate(cand.name), result.weights
        )
        if error is not None:
            run.reject(cand, error)


# ---------------------------------------------------------------------------- choice


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
        chosen.final_check = _fresh_calls_check(chosen, reference, run)
        if chosen.final_check.passed:
            return outcome
        message = f"a fresh call after the race failed validation: {chosen.final_check.reason}"
        if chosen.is_reference:
            raise ReferenceCheckError(f"the reference plan {chosen.name!r}: {message}")
        run.reject(chosen, StageError(Stage.REVALIDATION, message))


def _fresh_calls_check(
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
    except Exception as exc:
        return ValidationResult.rejected(f"the call raised {type(exc).__name__}: {exc}")
    return validate_calls(cand, outputs, reference, run.policy)


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


def close_all(candidates: Sequence[CandidateState], keep: CandidateState | None = None) -> None:
    """Release every built plan except ``keep`` (the one a decision will own)."""
    for cand in candidates:
        if cand is not keep and cand.plan is not None:
            with contextlib.suppress(Exception):
                cand.plan.close()
