"""``InferenceOptimizer``: wires the stages of a selection together (dlopt.pipeline).

reference (eager fp32, checked) -> [plan cache: a record of this key, revalidated, is
served] -> plans -> prepare each (probe, build, first calls,
validation, build limits) -> race -> revalidate -> measured limits -> choose (with a
final check of the chosen plan) -> report -> OptimizationDecision
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs
import torch

from dlopt.api.decision import OptimizationDecision
from dlopt.api.policy import OptimizationPolicy
from dlopt.api.target import ExecutionTarget
from dlopt.api.workload import WorkloadCase, WorkloadProfile
from dlopt.cache import lookup
from dlopt.cache.revalidate import Revalidation, program_saver, revalidate_record
from dlopt.errors import ConfigurationError, ReferenceCheckError, SelectionCancelled
from dlopt.events import Event, EventKind
from dlopt.evidence.assembly import build_report
from dlopt.measurement import Clock, MonotonicClock
from dlopt.pipeline import batches, checks, choose, constraints, plans, prepare, race, state
from dlopt.platform.fileio import TemporaryArtifacts, check_can_create_in
from dlopt.plugins.contract import ExecutionProvider, ProviderContext
from dlopt.plugins.discovery import load_providers
from dlopt.plugins.registry import ProviderRegistry
from dlopt.validation import ModelGuard, ReferenceOutputs, capture_reference
from dlopt.vocabulary import Objective

Observer = Callable[[Event], None]


def _checked_artifact_dir(artifact_dir: str | Path | None) -> Path | None:
    """A named artifact directory must be a directory that exists or can be created and
    written: found out now, not as every plan's build failing with FileNotFoundError."""
    if artifact_dir is None:
        return None
    if isinstance(artifact_dir, str) and not artifact_dir:
        raise ConfigurationError(
            "artifact_dir is empty: give a directory, or None for a temporary one"
        )
    path = Path(artifact_dir)
    if path.exists() and not path.is_dir():
        raise ConfigurationError(
            f"artifact_dir {path} exists and is not a directory: give a directory for plan "
            "artifacts, or None for a temporary one"
        )
    try:
        check_can_create_in(path, purpose="plan artifacts")
    except ValueError as exc:
        raise ConfigurationError(f"artifact_dir {path}: {exc}") from None
    return path


class InferenceOptimizer:
    """Selects the plan that serves a model fastest, without giving up correctness.

    ``providers``: explicit provider instances; each replaces a discovered provider of the
    same name (or adds one). ``registry``: providers already loaded (default: core's
    built-ins plus every ``dlopt.providers`` entry point). ``clock``: the measurement
    clock (tests inject a fake one). ``observers``: callables receiving progress events,
    in addition to ``dlopt_on_event`` hook implementations. ``artifact_dir``: where plans
    write engines and exported models (default: a temporary directory owned by the
    decision, removed when the decision is closed or garbage-collected; a directory you
    name is kept).
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
        self.artifact_dir = _checked_artifact_dir(artifact_dir)

    # -- public API ------------------------------------------------------------------
    @property
    def registry(self) -> ProviderRegistry | None:
        """The providers this optimizer was given (``None``: discovered at each select)."""
        return self._registry

    def with_policy(
        self, policy: OptimizationPolicy, *, observers: Sequence[Observer] | None = None
    ) -> InferenceOptimizer:
        """A copy racing under ``policy`` (and ``observers``, when given); the target,
        providers, registry, clock and artifact directory are shared."""
        return InferenceOptimizer(
            self.target,
            policy,
            self.explicit_providers,
            registry=self._registry,
            clock=self.clock,
            observers=self.observers if observers is None else observers,
            artifact_dir=self.artifact_dir,
        )

    def select_signature(
        self, model: torch.nn.Module, *args: Any, **kwargs: Any
    ) -> OptimizationDecision:
        """Select for one request signature: ``select_signature(model, x)``."""
        return self.select(model, WorkloadProfile.single(*args, **kwargs))

    def select(
        self,
        model: torch.nn.Module | str | Callable[[], Any],
        workload: WorkloadProfile | Sequence[WorkloadCase] | None = None,
        *,
        should_continue: Callable[[], bool] | None = None,
    ) -> OptimizationDecision:
        """Race every eligible plan on ``workload`` and return the decision.

        ``should_continue`` (another thread's cancel flag, a deadline) is asked before
        each plan is built and between warm-ups and rounds of the race. Before the race,
        ``False`` raises :class:`~dlopt.errors.SelectionCancelled` (every built plan is
        released); during the race it ends the rounds (``stop_reason`` ``"cancelled"``)
        and the decision is made from the rounds run, whose intervals hold at any stop.

        In process (``OptimizationPolicy(isolation="in_process")``, the default) every
        provider runs in this process: a provider that segfaults, aborts or calls
        ``os._exit`` ends it, and a build or call that hangs holds this call forever.
        With ``isolation="process"`` the selection runs in a supervised worker process
        (:mod:`dlopt.isolation`) that survives those: ``model`` is then a factory the
        worker can rebuild it from (``"module:function"`` text or a module-level
        function; a live module is refused), ``workload`` may be omitted when the
        factory returns ``(model, workload)``, and the winner is built again here and
        validated against this process's reference before it is returned.
        """
        if self.policy.isolation == "process":
            from dlopt.isolation.supervisor import select_in_worker

            if workload is not None and not isinstance(workload, WorkloadProfile):
                workload = WorkloadProfile(cases=tuple(workload))
            with self._threads():
                return select_in_worker(self, model, workload, should_continue)
        if workload is None:
            raise ConfigurationError("select(model, workload): give the workload to race on")
        if not isinstance(model, torch.nn.Module):
            raise ConfigurationError(
                f"model must be a torch.nn.Module, got {type(model).__name__}; wrap plain "
                "functions in a Module"
            )
        if not isinstance(workload, WorkloadProfile):
            workload = WorkloadProfile(cases=tuple(workload))
        workload = batches.batches_to_race(workload, self.policy.objective)
        self._check_model_device(model)
        constraints = self.policy.constraints
        expected_calls = (
            constraints.expected_calls
            if constraints.expected_calls is not None
            else workload.expected_calls
        )
        if self.policy.objective is Objective.LIFECYCLE_LATENCY and expected_calls is None:
            raise ConfigurationError(
                "objective 'lifecycle_latency' needs a call horizon: set "
                "DeploymentConstraints(expected_calls=...) or WorkloadProfile(expected_calls=...)"
            )
        registry = self._registry if self._registry is not None else load_providers()
        with self._threads():
            return self._select(model, workload, registry, expected_calls, should_continue)

    # -- the pipeline, stage by stage -------------------------------------------------
    def _select(
        self,
        model: torch.nn.Module,
        workload: WorkloadProfile,
        registry: ProviderRegistry,
        expected_calls: int | None,
        should_continue: Callable[[], bool] | None = None,
    ) -> OptimizationDecision:
        run = state.Run(
            self.policy, self.target, self.clock, self._emitter(registry), should_continue
        )
        # A directory the caller named is theirs; otherwise the decision owns a temporary one.
        scratch: TemporaryArtifacts | None = None
        if self.artifact_dir is not None:
            artifact_dir = self.artifact_dir
        else:
            scratch = TemporaryArtifacts()
            artifact_dir = scratch.path
        context = ProviderContext(
            target=self.target, policy=self.policy, workload=workload, artifact_dir=artifact_dir
        )
        candidates = plans.choose_plans(registry, self.explicit_providers, self.policy)
        run.emit(
            Event(
                EventKind.RACE_STARTED,
                f"{len(candidates)} providers, {len(workload.cases)} cases",
                data={"providers": [c.name for c in candidates]},
            )
        )
        # The plan cache: a record of this very key is served once it revalidates.
        cached = _CacheStep()
        try:
            # The reference comes first: if eager fp32 cannot run the inputs, stop before building.
            guard = ModelGuard(model, snapshot=self.policy.quality.snapshot_weights)
            workload = batches.fit_to_memory(model, workload, self.target.input_device)
            context = attrs.evolve(context, workload=workload)
            reference = capture_reference(
                model, workload, self.policy.quality, target=self.target, guard=guard
            )
            if self.policy.plan_cache_dir is not None:
                cached = self._from_cache(
                    model, workload, candidates, context, reference, guard, run, scratch
                )
                if cached.decision is not None:
                    return cached.decision
            found, revalidation, revalidation_s = cached.found, cached.revalidation, cached.seconds
            for cand in candidates:  # the reference first: if it cannot serve, build no more
                if should_continue is not None and not should_continue():
                    raise SelectionCancelled(
                        f"cancelled before {cand.name!r} was built; no plan was raced"
                    )
                prepare.prepare(cand, model, context, reference, guard, run)
                if cand.is_reference and not cand.alive:
                    raise ReferenceCheckError(state.reference_failure(cand))
            raced = race.race(candidates, reference, workload, run)
            checks.check_model_after_race(model, guard)
            checks.revalidate(candidates, raced, reference, run)
            constraints.apply_measured_limits(candidates, raced.result, run)
            outcome = choose.choose_served(
                candidates, raced.result, expected_calls, reference, run, workload.batch_sizes
            )
            served = next(c for c in candidates if c.name == outcome.selected)
            serving = checks.serving_check(served, model, reference, workload, run)
            checks.check_model_after_race(model, guard)
            report = build_report(
                target=self.target,
                policy=self.policy,
                workload=workload,
                plugin_failures=registry.failures,
                candidates=candidates,
                race=raced.result,
                outcome=outcome,
                expected_calls=expected_calls,
                serving=serving,
            )
            if found is not None:
                report = attrs.evolve(
                    report,
                    cache=lookup.miss_evidence(
                        found, revalidation, revalidation_s, self.policy.reuse_cached_plan
                    ),
                )
        except BaseException:
            state.close_all(candidates)  # no decision will own any plan
            if scratch is not None:
                scratch.release()
            raise
        selected = next(c for c in candidates if c.name == outcome.selected)
        assert selected.plan is not None
        program = program_saver(selected, context, reference)
        if found is not None:
            report = lookup.store(found, report, selected, program, context.artifact_dir)
        state.close_all(candidates, keep=selected)
        run.emit(Event(EventKind.DECISION_MADE, outcome.reason, candidate=outcome.selected))
        return OptimizationDecision(
            selected.plan, report, scratch=scratch, program=program, fallback=model
        )

    def _from_cache(
        self,
        model: torch.nn.Module,
        workload: WorkloadProfile,
        candidates: list[state.CandidateState],
        context: ProviderContext,
        reference: ReferenceOutputs,
        guard: ModelGuard,
        run: state.Run,
        scratch: TemporaryArtifacts | None,
    ) -> _CacheStep:
        """Look this selection's key up; a record that revalidates is the decision."""
        assert self.policy.plan_cache_dir is not None
        found = lookup.look_up(
            self.policy.plan_cache_dir, model, workload, self.policy, self.target, candidates
        )
        if found.record is None or not self.policy.reuse_cached_plan:
            return _CacheStep(found)
        start = time.perf_counter()
        revalidation = revalidate_record(
            found.record, candidates, model, workload, context, reference, guard, run
        )
        seconds = time.perf_counter() - start
        step = _CacheStep(found, revalidation, seconds)
        if revalidation.reused and revalidation.selected is not None:
            assert revalidation.selected.plan is not None
            report = lookup.hit_report(found, revalidation, seconds, self.policy)
            run.emit(
                Event(EventKind.DECISION_MADE, revalidation.reason, candidate=report.selected_plan)
            )
            program = program_saver(revalidation.selected, context, reference, found.record)
            step.decision = OptimizationDecision(
                revalidation.selected.plan, report, scratch=scratch, program=program, fallback=model
            )
        return step

    def _emitter(self, registry: ProviderRegistry) -> Callable[[Event], None]:
        """Events go to every ``dlopt_on_event`` hook and to this optimizer's observers."""

        def emit(event: Event) -> None:
            registry.emit(event)
            for observer in self.observers:
                with contextlib.suppress(Exception):
                    observer(event)

        return emit

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


@attrs.define
class _CacheStep:
    """What the plan cache found before the race: the lookup, the revalidation of its
    record (if any) and, when the record revalidated, the decision to return."""

    found: lookup.Lookup | None = None
    revalidation: Revalidation | None = None
    seconds: float | None = None
    decision: OptimizationDecision | None = None
