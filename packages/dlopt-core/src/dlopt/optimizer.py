"""``InferenceOptimizer``: wires providers, validation, measurement and selection together.

One data flow, stage by stage (each stage lives in its own module):

    reference (eager fp32, checked) -> probe -> build (setup timed) -> first calls (timed)
    -> validate every case -> race (measurement) -> constraints -> choose (selection)
    -> OptimizationDecision + report
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import logging
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs
import torch

from dlopt.decision import OptimizationDecision
from dlopt.errors import (
    ConfigurationError,
    DloptError,
    ProviderBuildError,
    ReferenceCheckError,
)
from dlopt.events import Event, EventKind
from dlopt.evidence import CandidateState, build_report, weighted_statistic
from dlopt.measurement import (
    Clock,
    MemoryProbe,
    MonotonicClock,
    RaceResult,
    RatioInterval,
    run_race,
    time_call,
)
from dlopt.measurement.compare import paired_speedup
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
from dlopt.providers.loader import ProviderRegistry, load_providers, probe_provider
from dlopt.report import (
    StageError,
)
from dlopt.selection import Costs, SelectionOutcome, choose
from dlopt.serialization import finite_or_none
from dlopt.target import ExecutionTarget
from dlopt.validation import (
    InputFingerprint,
    ModelGuard,
    ModelMutatedError,
    ReferenceOutputs,
    ValidationResult,
    capture_reference,
    copy_inputs,
    validate_outputs,
)
from dlopt.workload import WorkloadCase, WorkloadProfile

Observer = Callable[[Event], None]
log = logging.getLogger(__name__)


class InferenceOptimizer:
    """Selects the plan that serves a model fastest, without giving up correctness.

    ``providers``: explicit provider instances; each replaces a discovered provider of the
    same name (or adds one). ``registry``: providers already loaded (default: core's
    built-ins plus every ``dlopt.providers`` entry point). ``clock``: the measurement
    clock (tests inject a fake one). ``observers``: callables receiving progress events,
    in addition to ``dlopt_on_event`` hook implementations. ``artifact_dir``: where plans
    write engines and exported models (default: a fresh temporary directory).
    """

    def __init__(
        self,
        target: ExecutionTarget | str = "cpu",
        policy: OptimizationPolicy | None = None,
        providers: Sequence[ExecutionProvider] = (),
        *,
        registry: ProviderRegistry | None = None,
        clock: Clock | None = None,
        observers: Sequence[Observer] = (),
        artifact_dir: str | Path | None = None,
    ) -> None:
        if not isinstance(target, (ExecutionTarget, str)):
            raise ConfigurationError(
                f"target must be an ExecutionTarget or a device string such as 'cpu', got "
                f"{type(target).__name__}"
            )
        if policy is not None and not isinstance(policy, OptimizationPolicy):
            raise ConfigurationError(
                f"policy must be an OptimizationPolicy, got {type(policy).__name__}: build one, "
                "e.g. OptimizationPolicy(constraints=DeploymentConstraints(min_speedup=1.05))"
            )
        if isinstance(providers, (str, bytes)) or not all(
            hasattr(p, "build") and hasattr(p, "probe") for p in providers
        ):
            raise ConfigurationError(
                "providers= takes provider objects (with name, probe and build), not names; "
                "to race only some installed plans use OptimizationPolicy(include=[...])"
            )
        if not all(callable(o) for o in observers):
            raise ConfigurationError("observers= takes callables that receive each Event")
        self.target = target if isinstance(target, ExecutionTarget) else ExecutionTarget(target)
        self.target.check_known()
        self.policy = policy if policy is not None else OptimizationPolicy()
        self.explicit_providers = tuple(providers)
        self._registry = registry
        self.clock = clock if clock is not None else MonotonicClock()
        self.observers = tuple(observers)
        self.artifact_dir = Path(artifact_dir) if artifact_dir is not None else None

    # -- public API ------------------------------------------------------------------
    def select_signature(
        self, model: torch.nn.Module, *args: Any, **kwargs: Any
    ) -> OptimizationDecision:
        """Select for one request signature: ``select_signature(model, x)``."""
        return self.select(model, WorkloadProfile.single(*args, **kwargs))

    def select(
        self, model: torch.nn.Module, workload: WorkloadProfile | Sequence[WorkloadCase]
    ) -> OptimizationDecision:
        """Race every eligible plan on ``workload`` and return the decision."""
        if not isinstance(model, torch.nn.Module):
            raise ConfigurationError(
                f"model must be a torch.nn.Module, got {type(model).__name__}; wrap plain "
                "functions in a Module"
            )
        if not isinstance(workload, WorkloadProfile):
            workload = WorkloadProfile(cases=tuple(workload))
        self._check_model_device(model)
        constraints = self.policy.constraints
        expected_calls = (
            constraints.expected_calls
            if constraints.expected_calls is not None
            else workload.expected_calls
        )
        if self.policy.objective == "lifecycle_latency" and expected_calls is None:
            raise ConfigurationError(
                "objective 'lifecycle_latency' needs a call horizon: set "
                "DeploymentConstraints(expected_calls=...) or WorkloadProfile(expected_calls=...)"
            )
        registry = self._registry if self._registry is not None else load_providers()
        with self._threads():
            return self._select(model, workload, registry, expected_calls)

    # -- stages ----------------------------------------------------------------------
    def _select(
        self,
        model: torch.nn.Module,
        workload: WorkloadProfile,
        registry: ProviderRegistry,
        expected_calls: int | None,
    ) -> OptimizationDecision:
        emit = functools.partial(self._emit, registry)
        artifact_dir = self.artifact_dir or Path(tempfile.mkdtemp(prefix="dlopt-"))
        context = ProviderContext(
            target=self.target, policy=self.policy, workload=workload, artifact_dir=artifact_dir
        )
        candidates = [CandidateState(info) for info in self._providers(registry)]
        emit(
            Event(
                EventKind.RACE_STARTED,
                f"{len(candidates)} providers, {len(workload.cases)} cases",
                data={"providers": [c.name for c in candidates]},
            )
        )

        # The reference comes first: if eager fp32 cannot run the inputs, stop before building.
        guard = ModelGuard(model, snapshot=self.policy.quality.snapshot_weights)
        reference = capture_reference(
            model, workload, self.policy.quality, target=self.target, guard=guard
        )

        try:
            # eager_fp32 comes first: if its plan cannot serve, nothing else is built.
            for cand in candidates:
                self._prepare(cand, model, context, reference, guard, emit)
                if cand.is_reference and not cand.alive:
                    raise ReferenceCheckError(_reference_failure(cand))

            race, last_outputs = self._race(candidates, reference, workload, emit)
            self._check_model_after_race(model, guard)
            self._revalidate_last_outputs(candidates, last_outputs, reference, emit)
            self._apply_measured_constraints(candidates, race, emit)
            outcome = self._choose_checked(candidates, race, expected_calls, reference, emit)
            self._check_model_after_race(model, guard)
            report = build_report(
                self.target,
                self.policy,
                workload,
                registry,
                candidates,
                race,
                outcome,
                expected_calls,
            )
        except BaseException:
            # No decision will own any plan: release every one that was built.
            self._close_all(candidates)
            raise
        selected = next(c for c in candidates if c.name == outcome.selected)
        for cand in candidates:
            if cand is not selected and cand.plan is not None:
                cand.plan.close()
        emit(Event(EventKind.DECISION_MADE, outcome.reason, candidate=outcome.selected))
        assert selected.plan is not None
        return OptimizationDecision(selected.plan, report)

    def _providers(self, registry: ProviderRegistry) -> list[ProviderInfo]:
        names = [check_plan_name(p.name, plugin="explicit") for p in self.explicit_providers]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            # A dict keyed by name would keep the last one silently.
            raise ConfigurationError(
                f"providers= holds more than one provider named {', '.join(map(repr, repeated))}; "
                "plan names must be unique: rename one or pass only one"
            )
        # A typo in include/exclude would silently race other plans than the user meant.
        check_plan_names(self.policy, [*(i.name for i in registry.providers), *names])
        explicit = {p.name: ProviderInfo(p, plugin="explicit") for p in self.explicit_providers}
        infos: list[ProviderInfo] = []
        for info in registry.providers:
            infos.append(explicit.pop(info.name, info))
        infos.extend(explicit.values())
        # The reference (eager fp32) always races, whatever include/exclude say, and first.
        roles = {i.name: _declared_role(i) for i in infos}
        chosen = [i for i in infos if roles[i.name] is Role.REFERENCE or self.policy.wants(i.name)]
        references = [i.name for i in chosen if roles[i.name] is Role.REFERENCE]
        if len(references) != 1:
            raise ConfigurationError(
                "no provider declares the reference role (core's eager_fp32 does): reinstall "
                "dlopt-core"
                if not references
                else f"more than one provider declares the reference role: "
                f"{', '.join(references)}; only one plan (eager fp32) can be the reference: "
                "a plugin's plan declares Role.NATIVE or Role.CHALLENGER"
            )
        chosen.sort(key=lambda i: roles[i.name] is not Role.REFERENCE)
        self._check_plan_options(chosen)
        return chosen

    def _prepare(
        self,
        cand: CandidateState,
        model: torch.nn.Module,
        context: ProviderContext,
        reference: ReferenceOutputs,
        guard: ModelGuard,
        emit: Callable[[Event], None],
    ) -> None:
        """Probe, build (timed), first-call every case (timed), check the model, validate."""
        context = attrs.evolve(context, options=self._plan_options(cand.info))
        cand.options = context.options
        cand.status = probe_provider(cand.info, context)
        if not cand.status.availability.available:
            emit(
                Event(
                    EventKind.PROVIDER_UNAVAILABLE,
                    cand.status.availability.reason or "unavailable",
                    candidate=cand.name,
                )
            )
            return
        # Build gets what core knows: the inputs as plans are called with them, the
        # reference outputs and the probe's answer (no second probe, no second eager run).
        context = attrs.evolve(
            context,
            cases=prepared_cases(reference),
            availability=cand.status.availability,
        )
        sync = self._synchronize(None)
        outputs: list[Any] = []
        memory_probe = MemoryProbe(self.target.device).start()
        try:
            stage = "build"
            try:
                built: list[Any] = []
                cand.setup_s = time_call(
                    lambda: built.append(cand.info.provider.build(model, context)), self.clock, sync
                )
                # Only a real BuiltPlan is kept (everything later closes and reads it), and
                # only once its names, paths and values are checked at the plugin boundary.
                if isinstance(built[0], BuiltPlan):
                    cand.plan = built[0]
                self._check_model(cand, model, guard, stage)
                plan: BuiltPlan = check_built_plan(
                    built[0], context, plan_name=cand.name, plugin=cand.info.plugin
                )
                stage = "first_call"
                sync = self._synchronize(plan)
                with torch.inference_mode():
                    for case in reference.cases:
                        # Its own copy: a plan that writes into its inputs must not change
                        # what the plans judged after it see.
                        args, kwargs = copy_inputs(case.args, case.kwargs)
                        before = InputFingerprint.of(args, kwargs)
                        call = functools.partial(_call_into, outputs, plan, args, kwargs)
                        cand.first_calls_s.append(time_call(call, self.clock, sync))
                        _check_inputs_unchanged(before, args, kwargs, case.name)
                self._check_model(cand, model, guard, stage)
            except ModelMutatedError:
                raise  # the user's model is changed for good: no result can be trusted
            except Exception as exc:
                if cand.error is None:
                    message = (
                        str(exc)
                        if isinstance(exc, (InputsWrittenError, ProviderBuildError))
                        else f"{type(exc).__name__}: {exc}"
                    )
                    # A plan can change the model and then fail: put the weights back too.
                    problem = guard.check(model, stage=stage, plan=cand.name)
                    if problem is not None:
                        _restore(guard, model, problem)
                        message += f" (and {problem}; the weights were restored)"
                    cand.error = StageError(stage, message)
        finally:
            cand.memory = memory_probe.stop()
            cand.device_memory_mb = _device_memory(cand.plan)
        if cand.error is None:
            cand.validation = self._validate_calls(cand, outputs, reference)
            if not cand.validation.passed:
                cand.error = StageError("validation", cand.validation.reason or "failed validation")
        if cand.error is None:
            self._apply_build_constraints(cand)
        if cand.error is not None:
            self._reject(cand, emit)
            return
        emit(
            Event(
                EventKind.CANDIDATE_VALIDATED,
                "passed validation on every case",
                candidate=cand.name,
                data={"setup_time_s": cand.setup_s, "first_call_time_s": sum(cand.first_calls_s)},
            )
        )

    def _check_model(
        self, cand: CandidateState, model: torch.nn.Module, guard: ModelGuard, stage: str
    ) -> None:
        problem = guard.check(model, stage=stage, plan=cand.name)
        if problem is None:
            return
        # Put the user's weights back before anything else runs on them.
        _restore(guard, model, problem)
        cand.error = StageError(stage, problem + " (the weights were restored)")
        raise RuntimeError(problem)

    def _check_model_after_race(self, model: torch.nn.Module, guard: ModelGuard) -> None:
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

    def _apply_build_constraints(self, cand: CandidateState) -> None:
        limits = self.policy.constraints
        cand.error = _first_violation(
            ("setup time", cand.setup_s, limits.max_setup_time_s, "max_setup_time_s", "s"),
            (
                "first call",
                max(cand.first_calls_s, default=None),
                limits.max_first_call_time_s,
                "max_first_call_time_s",
                "s",
            ),
            (
                "peak memory",
                cand.memory.mb if cand.memory else None,
                limits.max_peak_memory_mb,
                "max_peak_memory_mb",
                " MB",
            ),
            (
                "device-wide memory growth",
                cand.memory.device_wide_mb if cand.memory else None,
                limits.max_peak_memory_mb,
                "max_peak_memory_mb",
                " MB",
            ),
            (
                "device memory (as the plan's runtime reports it)",
                cand.device_memory_mb,
                limits.max_peak_memory_mb,
                "max_peak_memory_mb",
                " MB",
            ),
        )

    def _plan_options(self, info: ProviderInfo) -> Any:
        """The plan's options: the user's values for it, over the provider's defaults."""
        options_type = getattr(info.provider, "options_type", None)
        if options_type is None:
            return None
        return structure_options(
            options_type, self.policy.plan_options.get(info.name, {}), plan=info.name
        )

    def _check_plan_options(self, chosen: list[ProviderInfo]) -> None:
        """Options for a plan that is not raced, or that takes none, are a user's mistake."""
        by_name = {i.name: i for i in chosen}
        for name, values in self.policy.plan_options.items():
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
            self._plan_options(info)  # refuses unknown or ill-typed values now, not mid-race

    def _race(
        self,
        candidates: list[CandidateState],
        reference: ReferenceOutputs,
        workload: WorkloadProfile,
        emit: Callable[[Event], None],
    ) -> tuple[RaceResult, dict[str, list[LastOutput]]]:
        """Measure every surviving plan; also returns each plan's last output per case."""
        alive = [c for c in candidates if c.alive]
        callables: dict[str, list[LastOutput]] = {}
        for cand in alive:
            assert cand.plan is not None
            callables[cand.name] = [
                LastOutput(cand.plan, case.args, case.kwargs) for case in reference.cases
            ]

        def on_round(round_number: int, snapshot: RaceResult) -> None:
            emit(
                Event(
                    EventKind.ROUND_FINISHED,
                    f"round {round_number}",
                    data={
                        "round": round_number,
                        "resolved": [
                            m.name
                            for m in snapshot.candidates
                            if m.verdict in ("faster", "not_faster", "dropped")
                        ],
                    },
                )
            )

        try:
            with torch.inference_mode():
                race = run_race(
                    callables,
                    weights=workload.weights,
                    baseline=alive[0].name,  # the reference, first and alive
                    min_speedup=self.policy.constraints.min_speedup,
                    policy=self.policy.measurement,
                    clock=self.clock,
                    synchronize={c.name: self._synchronize(c.plan) for c in alive},
                    on_round=on_round,
                    case_names=[case.name for case in reference.cases],
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
        emit(
            Event(
                EventKind.RACE_FINISHED,
                f"{race.rounds} rounds, stop: {race.stop_reason}",
                data={"rounds": race.rounds, "stop_reason": race.stop_reason},
            )
        )
        for cand in alive:
            measured = race.candidate(cand.name)
            if measured.verdict == "failed":
                cand.error = StageError("measure", measured.error or "failed during measurement")
                self._reject(cand, emit)
        return race, callables

    def _validate_calls(
        self, cand: CandidateState, outputs: Sequence[Any], reference: ReferenceOutputs
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
                    policy=self.policy.quality,
                    case_name=case.name,
                )
                for out, case in zip(outputs, reference.cases)
            )
        except Exception as exc:
            # Outputs validation cannot even read (e.g. tensors without data) fail the check.
            return ValidationResult.rejected(
                f"checking the outputs raised {type(exc).__name__}: {exc}"
            )

    def _revalidate_last_outputs(
        self,
        candidates: list[CandidateState],
        last_outputs: dict[str, list[LastOutput]],
        reference: ReferenceOutputs,
        emit: Callable[[Event], None],
    ) -> None:
        """Every survivor's output of its last measured call, per case, passes validation
        again: a plan is served only if it was correct on the calls it was judged on."""
        for cand in candidates:
            recorders = last_outputs.get(cand.name)
            if not cand.alive or recorders is None or not all(r.calls for r in recorders):
                continue  # not measured (a race without challengers runs nothing)
            cand.revalidation = self._validate_calls(cand, [r.output for r in recorders], reference)
            if cand.revalidation.passed:
                continue
            message = (
                "the outputs of its last measured calls failed validation: "
                f"{cand.revalidation.reason}"
            )
            if cand.is_reference:
                raise ReferenceCheckError(
                    f"the reference plan {cand.name!r} drifted during the race: {message}; "
                    "the model is not deterministic across calls"
                )
            cand.error = StageError("revalidation", message)
            self._reject(cand, emit)

    def _choose_checked(
        self,
        candidates: list[CandidateState],
        race: RaceResult,
        expected_calls: int | None,
        reference: ReferenceOutputs,
        emit: Callable[[Event], None],
    ) -> SelectionOutcome:
        """Choose, then run the chosen plan once more per case on fresh copies of the inputs
        and validate it; a plan that fails is rejected and the choice is made again."""
        while True:
            outcome = self._choose(candidates, race, expected_calls)
            chosen = next(c for c in candidates if c.name == outcome.selected)
            chosen.final_check = self._fresh_calls_check(chosen, reference)
            if chosen.final_check.passed:
                return outcome
            message = f"a fresh call after the race failed validation: {chosen.final_check.reason}"
            if chosen.is_reference:
                raise ReferenceCheckError(f"the reference plan {chosen.name!r}: {message}")
            chosen.error = StageError("revalidation", message)
            self._reject(chosen, emit)

    def _fresh_calls_check(
        self, cand: CandidateState, reference: ReferenceOutputs
    ) -> ValidationResult:
        assert cand.plan is not None
        sync = self._synchronize(cand.plan)
        outputs = []
        try:
            with torch.inference_mode():
                for case in reference.cases:
                    args, kwargs = copy_inputs(case.args, case.kwargs)
                    outputs.append(cand.plan(*args, **kwargs))
                    if sync is not None:
                        sync()
        except Exception as exc:
            return ValidationResult.rejected(f"the call raised {type(exc).__name__}: {exc}")
        return self._validate_calls(cand, outputs, reference)

    def _apply_measured_constraints(
        self, candidates: list[CandidateState], race: RaceResult, emit: Callable[[Event], None]
    ) -> None:
        limits = self.policy.constraints
        for cand in candidates:
            if not cand.alive or cand.is_reference:
                continue
            measured = race.candidate(cand.name)
            cand.error = _first_violation(
                (
                    "mean latency",
                    measured.weighted_mean_ms,
                    limits.max_latency_ms,
                    "max_latency_ms",
                    " ms",
                ),
                (
                    "p99 latency",
                    weighted_statistic(race, measured, "p99_ms"),
                    limits.max_p99_latency_ms,
                    "max_p99_latency_ms",
                    " ms",
                ),
            )
            if cand.error is not None:
                self._reject(cand, emit)

    def _choose(
        self, candidates: list[CandidateState], race: RaceResult, expected_calls: int | None
    ) -> SelectionOutcome:
        eligible = []
        unmeasured = []
        for cand in candidates:
            if not cand.alive:
                continue
            steady = race.candidate(cand.name).weighted_mean_ms
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
                )
            )

        reference = candidates[0].name

        def steady_speedup(name: str, against: str) -> RatioInterval | None:
            if against == reference:
                return race.candidate(name).speedup_vs_baseline
            return paired_speedup(race, name, against)

        return choose(
            objective=self.policy.objective,
            min_speedup=self.policy.constraints.min_speedup,
            expected_calls=expected_calls,
            eligible=eligible,
            steady_speedup=steady_speedup,
            confidence=race.confidence,
            unmeasured=unmeasured,
            budget_note=race.budget_overrun() if race.stop_reason == "time_budget" else None,
            reference=reference,
            natives=[c.name for c in candidates if c.role is Role.NATIVE],
        )

    # -- helpers ---------------------------------------------------------------------
    def _reject(self, cand: CandidateState, emit: Callable[[Event], None]) -> None:
        assert cand.error is not None
        if cand.plan is not None and not cand.is_reference:
            cand.plan.close()
        emit(
            Event(
                EventKind.CANDIDATE_REJECTED,
                f"{cand.error.stage}: {cand.error.message}",
                candidate=cand.name,
                data={"stage": cand.error.stage},
            )
        )

    def _close_all(self, candidates: list[CandidateState]) -> None:
        for cand in candidates:
            if cand.plan is not None:
                cand.plan.close()

    def _emit(self, registry: ProviderRegistry, event: Event) -> None:
        registry.emit(event)
        for observer in self.observers:
            with contextlib.suppress(Exception):
                observer(event)

    def _synchronize(self, plan: BuiltPlan | None) -> Callable[[], None] | None:
        """What waits for a plan's queued work before a timer stops: the plan's own
        ``synchronize`` if it has one, else the target's torch device (CUDA)."""
        if plan is not None and plan.synchronize is not None:
            return plan.synchronize
        if self.target.is_cuda:
            return functools.partial(torch.cuda.synchronize, torch.device(self.target.device))
        return None

    def _check_model_device(self, model: torch.nn.Module) -> None:
        tensor: torch.Tensor | None = next(iter(model.parameters()), None)
        if tensor is None:
            tensor = next(iter(model.buffers()), None)
        if tensor is None:
            return
        where = self.target.input_device
        if tensor.device.type != where.partition(":")[0]:
            raise ConfigurationError(
                f"the model's weights are on {tensor.device} but the target expects the model "
                f"on {where}: move the model first (model.to({where!r})) or choose "
                f"ExecutionTarget({tensor.device.type!r})"
            )

    @contextlib.contextmanager
    def _threads(self) -> Iterator[None]:
        if self.target.threads is None or self.target.device_type != "cpu":
            yield
            return
        previous = torch.get_num_threads()
        torch.set_num_threads(self.target.threads)
        try:
            yield
        finally:
            torch.set_num_threads(previous)


def _restore(guard: ModelGuard, model: torch.nn.Module, problem: str) -> None:
    """Undo a plan's change to the user's model, or stop the selection naming the plan."""
    try:
        guard.restore(model)
    except ModelMutatedError as exc:
        raise ModelMutatedError(f"{problem}; {exc}") from exc


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


def _reference_failure(cand: CandidateState) -> str:
    """Why the reference plan cannot serve, for the error the user sees."""
    what = f"the reference plan {cand.name!r}"
    if cand.status is not None and not cand.status.availability.available:
        reason = cand.status.availability.reason or "no reason given"
        return f"{what} is unavailable: {reason}"
    if cand.error is not None:
        return f"{what} failed at {cand.error.stage}: {cand.error.message}"
    return f"{what} was not built"


def _declared_role(info: ProviderInfo) -> Role:
    try:
        return Role.of(info.provider)
    except TypeError as exc:
        raise ConfigurationError(f"{exc} (plugin {info.plugin!r})") from None


def _first_violation(
    *checks: tuple[str, float | None, float | None, str, str],
) -> StageError | None:
    """The first ``(what, value, limit, limit_name, unit)`` whose value exceeds its limit.

    A limit of ``None`` is not set; a value of ``None`` was not measured and cannot violate.
    """
    for what, value, limit, limit_name, unit in checks:
        if limit is not None and value is not None and value > limit:
            return StageError(
                "constraint", f"{what} {value:.3f}{unit} > {limit_name} {limit:g}{unit}"
            )
    return None


def _call_into(
    outputs: list[Any], plan: BuiltPlan, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    outputs.append(plan(*args, **kwargs))


class InputsWrittenError(Exception):
    """A plan wrote into the inputs it was called with."""


def _check_inputs_unchanged(
    before: InputFingerprint, args: tuple[Any, ...], kwargs: dict[str, Any], case: str
) -> None:
    changed = before.changed_paths(args, kwargs)
    if changed:
        raise InputsWrittenError(
            f"the plan wrote into its inputs on case {case!r} (input {', '.join(changed)} "
            "changed): plans must treat their inputs as read-only; copy an input before "
            "writing to it"
        )


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
