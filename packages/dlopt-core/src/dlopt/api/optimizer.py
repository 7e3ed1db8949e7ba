"""``InferenceOptimizer``: the public way to run a selection.

It checks what it is given, converts the workload once (a ``WorkloadProfile``, cut to the
batch sizes the objective races) and runs :func:`dlopt.engine.select.select`, in this
process or, with ``isolation="process"``, in a supervised worker
(:func:`dlopt.isolation.supervisor.select_in_worker`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from dlopt.contract.provider import ProviderProtocol
from dlopt.engine.decision import OptimizationDecision
from dlopt.engine.select import Selection, select
from dlopt.errors import ConfigurationError
from dlopt.events import Event, fan_out
from dlopt.measurement import Clock, MonotonicClock
from dlopt.pipeline.batches import batches_to_race
from dlopt.pipeline.state import SelectionContext
from dlopt.platform.fileio import check_can_create_in
from dlopt.plugins.discovery import load_providers
from dlopt.plugins.registry import ProviderRegistry
from dlopt.settings.policy import OptimizationPolicy
from dlopt.settings.target import ExecutionTarget
from dlopt.settings.workload import WorkloadCase, WorkloadProfile
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
        providers: Sequence[ProviderProtocol] = (),
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

        Either way the selection is :func:`dlopt.engine.select.select`, on the workload
        converted here, once.
        """
        started_ns = self.clock.now_ns()  # the time budget counts from here, plugins loaded after
        ref: str | None = None  # the factory an isolated worker rebuilds the model from
        if self.policy.isolation == "process":
            # Nothing of a plugin runs here before the race (the worker loads them): without
            # a registry the events go to this optimizer's observers only.
            ref, model, workload = self._host_model(model, workload)
            registry = self._registry
        else:
            model = self._checked_model(model, workload)
            registry = self._registry if self._registry is not None else load_providers()
        assert workload is not None
        selection = self._selection(model, workload, registry, should_continue, started_ns)
        with self._threads():
            if ref is not None:
                from dlopt.isolation.supervisor import select_in_worker

                return select_in_worker(selection, ref)
            return select(selection)

    def _checked_model(self, model: Any, workload: object) -> torch.nn.Module:
        """An in-process selection's model, checked: a live module on the target's device,
        with its workload given."""
        if workload is None:
            raise ConfigurationError("select(model, workload): give the workload to race on")
        if not isinstance(model, torch.nn.Module):
            raise ConfigurationError(
                f"model must be a torch.nn.Module, got {type(model).__name__}; wrap plain "
                "functions in a Module"
            )
        self._check_model_device(model)
        return model

    def _host_model(
        self, model: Any, workload: WorkloadProfile | Sequence[WorkloadCase] | None
    ) -> tuple[str, torch.nn.Module, WorkloadProfile | Sequence[WorkloadCase]]:
        """An isolated selection's factory reference, the host's own copy of the model
        (the winner is validated against it here) and the workload (the factory's, when
        none is given)."""
        from dlopt.isolation.supervisor import build_host_model, model_reference

        ref = model_reference(model)
        host_model, returned = build_host_model(ref, self.target)
        if workload is None:
            if returned is None:
                raise ConfigurationError(
                    f"no workload: pass one to select(), or return (model, WorkloadProfile) "
                    f"from {ref}"
                )
            workload = returned
        return ref, host_model, workload

    def _selection(
        self,
        model: torch.nn.Module,
        workload: WorkloadProfile | Sequence[WorkloadCase],
        registry: ProviderRegistry | None,
        should_continue: Callable[[], bool] | None,
        started_ns: int | None = None,
    ) -> Selection:
        """What one selection runs, with the workload converted (a profile, cut to the
        batch sizes the objective races) and checked against the objective, once."""
        if not isinstance(workload, WorkloadProfile):
            workload = WorkloadProfile(cases=tuple(workload))
        workload = batches_to_race(workload, self.policy.objective)
        constraints = self.policy.constraints
        horizon = (
            constraints.expected_calls
            if constraints.expected_calls is not None
            else workload.expected_calls
        )
        if self.policy.objective is Objective.LIFECYCLE_LATENCY and horizon is None:
            raise ConfigurationError(
                "objective 'lifecycle_latency' needs a call horizon: set "
                "DeploymentConstraints(expected_calls=...) or WorkloadProfile(expected_calls=...)"
            )
        sinks = [registry.emit] if registry is not None else []
        context = SelectionContext(
            self.policy,
            self.target,
            self.clock,
            fan_out(*sinks, *self.observers),
            should_continue,
            started_ns=started_ns if started_ns is not None else self.clock.now_ns(),
        )
        return Selection(
            model,
            workload,
            context,
            registry,
            self.explicit_providers,
            self.artifact_dir,
        )

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
