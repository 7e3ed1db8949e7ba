"""``OptimizationAgentToolkit``: a closed set of four JSON tools over host-registered workloads.

Agents cannot pass live modules or tensors through JSON, so the host registers its
workloads (model plus representative inputs) in process, under plain names, and hands
an agent the tools. Every tool takes a JSON object validated against its published
schema (:mod:`dlopt.agents.schemas`) and returns a JSON object, never an exception:

``dlopt_inspect_runtime``  the machine and every installed plan, available or why not
``dlopt_list_workloads``   the registered workloads and their latest decisions
``dlopt_optimize``         race the plans on one workload, within the host's budgets
``dlopt_read_report``      the latest decision's summary, or one candidate's evidence

Bounded by construction: no tool evaluates code, imports a module, opens a path or a
network connection named by the caller; names are checked against what the host
registered. An optimize call's measurement budget cannot exceed the host's caps
(:class:`ToolkitLimits`), a race for a workload already racing is never started twice,
one race runs at a time in the process (concurrent races would time each other), and
the host can cancel a call (:meth:`OptimizationAgentToolkit.cancel`): a cancelled call
returns a ``cancelled`` error and keeps nothing, while a call whose time limit
(``ToolkitLimits.max_call_s``) runs out during the race returns the decision made from
the rounds run (``time_limit_reached``).
"""

from __future__ import annotations

import copy
import itertools
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import jsonschema
import torch
from attrs import field, frozen

from dlopt.agents import views
from dlopt.agents.schemas import (
    INSPECT_RUNTIME,
    LIST_WORKLOADS,
    OPTIMIZE,
    READ_REPORT,
    TOOL_NAMES,
    ErrorCode,
    ToolCaps,
    tool_schemas,
)
from dlopt.agents.tool_results import (
    MIN_RESULT_CHARS,
    ToolError,
    clip,
    failure,
    parse_arguments,
    success,
)
from dlopt.api.optimizer import InferenceOptimizer
from dlopt.contract.provider import ProviderContext, ProviderInfo, Role
from dlopt.engine.decision import OptimizationDecision
from dlopt.errors import ConfigurationError, DloptError, SelectionCancelled, WorkloadError
from dlopt.evidence.provenance import inspect_runtime
from dlopt.evidence.report import OptimizationReport
from dlopt.pipeline.probe import probe_provider
from dlopt.platform.config_checks import integer, number
from dlopt.platform.names import NAME_RULE, is_plain_name
from dlopt.platform.serialization import strict_jsonable
from dlopt.plugins.discovery import load_providers
from dlopt.plugins.registry import ProviderRegistry, with_explicit
from dlopt.settings.workload import WorkloadProfile
from dlopt.vocabulary import Objective, StopReason

log = logging.getLogger(__name__)

#: One race at a time in this process, whichever toolkit starts it: two races timing
#: plans at once would each measure the other's load.
_RACE_LOCK = threading.Lock()
#: How often a call waiting for the race lock looks for its cancellation.
_WAIT_POLL_S = 0.05
#: The clock of ``ToolkitLimits.max_call_s`` (a module name, so tests can move time).
_now = time.monotonic

_optional_positive = number(minimum=0, low_open=True, optional=True)


@frozen
class ToolkitLimits:
    """The host's budgets for what agents may ask.

    ``max_measure_time_s`` / ``max_rounds``: the largest measurement budget an optimize
    call may ask for, and the budget it gets when it asks for none (``None``: the
    optimizer policy's own ``max_time_s`` / ``max_rounds``). ``max_call_s``: the most
    wall-clock seconds one optimize call may take, builds and waiting for another race
    included: past it before the race, the call stops before the next plan is built
    with a ``time_limit`` error; past it during the race, the race ends at its next
    round and the call returns the decision made from the rounds run, marked
    ``time_limit_reached`` (the race's intervals hold at any stop). ``max_races``: how many races this toolkit may start in its
    life (``None``: no limit). ``max_result_chars``: the longest result, as compact JSON
    text. ``min_speedup_range``: the ``min_speedup`` values an agent may set.
    """

    max_measure_time_s: float | None = field(default=None, validator=_optional_positive)
    max_rounds: int | None = field(default=None, validator=integer(minimum=3, optional=True))
    max_call_s: float | None = field(default=None, validator=_optional_positive)
    max_races: int | None = field(default=None, validator=integer(minimum=0, optional=True))
    max_result_chars: int = field(default=20_000, validator=integer(minimum=MIN_RESULT_CHARS))
    min_speedup_range: tuple[float, float] = field(default=(1.0, 10.0), converter=tuple)

    @min_speedup_range.validator
    def _check_range(self, _attribute: object, value: tuple[float, ...]) -> None:
        check = number(minimum=0, low_open=True)
        if len(value) != 2:
            raise ConfigurationError(
                f"ToolkitLimits.min_speedup_range must be (lowest, highest), got {value!r}"
            )
        for bound in value:
            check(self, attrs.fields(ToolkitLimits).min_speedup_range, bound)
        if value[0] > value[1]:
            raise ConfigurationError(
                f"ToolkitLimits.min_speedup_range: lowest {value[0]} is above highest {value[1]}"
            )


@attrs.define
class _Workload:
    name: str
    model: torch.nn.Module
    profile: WorkloadProfile
    description: str


class _Job:
    """One running optimize call for one workload; later calls for it wait on it."""

    def __init__(
        self, policy: Any, deadline: float | None, batch_sizes: tuple[int, ...] | None = None
    ) -> None:
        self.policy = policy
        self.batch_sizes = batch_sizes
        self.deadline = deadline
        self.cancel_requested = threading.Event()
        self.done = threading.Event()
        self.outcome: dict[str, Any] | ToolError | None = None
        self.waiters = 0

    def stopped(self) -> ToolError | None:
        """Why the call must stop (the host cancelled it, or its time is up), if it must."""
        if self.cancel_requested.is_set():
            return ToolError(ErrorCode.CANCELLED, "the host cancelled this optimize call")
        if self.deadline is not None and _now() > self.deadline:
            return ToolError(
                ErrorCode.TIME_LIMIT,
                "the optimize call ran past the host's time limit (ToolkitLimits.max_call_s); "
                "ask for a smaller measurement budget or fewer plans (include/exclude)",
            )
        return None

    def should_continue(self) -> bool:
        """The selection's ``should_continue``: asked before each build and each round."""
        return self.stopped() is None


class OptimizationAgentToolkit:
    """Four JSON tools over the workloads a host registers, for any agent framework.

    ::

        toolkit = OptimizationAgentToolkit(InferenceOptimizer(target=ExecutionTarget("cpu")))
        toolkit.register_workload("resnet50-b8", model, sample, description="ResNet-50, batch 8")
        schemas = toolkit.tool_schemas()  # JSON Schema per tool
        result = toolkit.invoke("dlopt_optimize", {"workload": "resnet50-b8"})

    ``optimizer`` is the host's optimizer: its target, policy (constraints, quality,
    measurement), providers, registry, clock and observers apply to every race; an
    agent may change only the fields the ``dlopt_optimize`` schema lists, within
    ``limits``. The toolkit owns the latest decision of each workload (closed when a
    newer one replaces it, or on :meth:`close`); :meth:`take_decision` hands one to
    the host to serve. Thread-safe: tools may be called from several threads.
    """

    def __init__(self, optimizer: InferenceOptimizer, limits: ToolkitLimits | None = None) -> None:
        if not isinstance(optimizer, InferenceOptimizer):
            raise ConfigurationError(
                f"OptimizationAgentToolkit takes an InferenceOptimizer, got "
                f"{type(optimizer).__name__}: InferenceOptimizer(target=ExecutionTarget('cpu'))"
            )
        if limits is not None and not isinstance(limits, ToolkitLimits):
            raise ConfigurationError(f"limits must be a ToolkitLimits, got {type(limits).__name__}")
        self._optimizer = optimizer
        self.limits = limits if limits is not None else ToolkitLimits()
        self.caps = _caps(optimizer, self.limits)
        self._schemas = tool_schemas(self.caps)
        self._validators = {
            name: jsonschema.Draft202012Validator(schema) for name, schema in self._schemas.items()
        }
        self._handlers: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
            INSPECT_RUNTIME: self._inspect_runtime,
            LIST_WORKLOADS: self._list_workloads,
            OPTIMIZE: self._optimize,
            READ_REPORT: self._read_report,
        }
        self._lock = threading.Lock()
        self._workloads: dict[str, _Workload] = {}
        self._reports: dict[str, OptimizationReport] = {}
        self._decisions: dict[str, OptimizationDecision] = {}
        self._jobs: dict[str, _Job] = {}
        self._races_started = 0

    # -- the host's side ------------------------------------------------------------
    def register_workload(
        self,
        name: str,
        model: torch.nn.Module,
        *args: Any,
        description: str = "",
        **kwargs: Any,
    ) -> None:
        """Register one request signature: ``model(*args, **kwargs)`` under ``name``."""
        _check_workload_name(name)
        self.register_workload_profile(
            name, model, WorkloadProfile.single(*args, name=name, **kwargs), description=description
        )

    def register_workload_profile(
        self,
        name: str,
        model: torch.nn.Module,
        profile: WorkloadProfile,
        *,
        description: str = "",
        replace: bool = False,
    ) -> None:
        """Register a weighted traffic mix (``WorkloadProfile``) for ``model`` under ``name``.

        ``name`` is what agents call it by: a plain name (letters, digits, ``_.-``).
        Registering a name twice is refused unless ``replace=True``; a workload whose
        race is running cannot be replaced.
        """
        _check_workload_name(name)
        if not isinstance(model, torch.nn.Module):
            raise ConfigurationError(
                f"workload {name!r}: model must be a torch.nn.Module, got {type(model).__name__}"
            )
        if not isinstance(profile, WorkloadProfile):
            raise ConfigurationError(
                f"workload {name!r}: profile must be a WorkloadProfile, got "
                f"{type(profile).__name__}; use register_workload(name, model, *inputs) for "
                "one signature"
            )
        if not isinstance(description, str):
            raise ConfigurationError(f"workload {name!r}: description must be a string")
        with self._lock:
            if name in self._jobs:
                raise ConfigurationError(
                    f"workload {name!r} is being optimized; cancel it or wait before replacing it"
                )
            if name in self._workloads and not replace:
                raise ConfigurationError(
                    f"a workload named {name!r} is already registered; pass replace=True to "
                    "replace it"
                )
            self._workloads[name] = _Workload(name, model, profile, description)
            self._reports.pop(name, None)
            old = self._decisions.pop(name, None)
        if old is not None:
            old.close()

    def tool_schemas(self) -> dict[str, dict[str, Any]]:
        """The input JSON Schema of each tool, by tool name (a fresh copy)."""
        return copy.deepcopy(self._schemas)

    def cancel(self, workload: str | None = None) -> int:
        """Cancel the running (or waiting) optimize call for ``workload`` (every call if
        ``None``). It stops before its next plan is built, or at the race's next round;
        either way it closes what it built, keeps no decision (not even one made from
        the rounds already run) and returns a ``cancelled`` error (so do calls that
        joined it). Returns how many calls were asked to stop; nothing is remembered for
        later calls."""
        with self._lock:
            jobs = [job for name, job in self._jobs.items() if workload in (None, name)]
        for job in jobs:
            job.cancel_requested.set()
        return len(jobs)

    def in_flight(self) -> dict[str, int]:
        """Workloads with an optimize call running, and how many other calls wait on each."""
        with self._lock:
            return {name: job.waiters for name, job in self._jobs.items()}

    def report(self, workload: str) -> OptimizationReport | None:
        """The report of ``workload``'s latest decision (``None`` before the first)."""
        with self._lock:
            return self._reports.get(workload)

    def take_decision(self, workload: str) -> OptimizationDecision | None:
        """Hand ``workload``'s latest decision to the host, who now serves and closes it;
        the toolkit keeps only its report."""
        with self._lock:
            return self._decisions.pop(workload, None)

    def close(self) -> None:
        """Close every decision the toolkit still owns."""
        with self._lock:
            owned = list(self._decisions.values())
            self._decisions.clear()
        for decision in owned:
            decision.close()

    def __enter__(self) -> OptimizationAgentToolkit:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the tool boundary -----------------------------------------------------------
    def invoke(self, tool: str, arguments: Mapping[str, Any] | str | None = None) -> dict[str, Any]:
        """Call ``tool`` with JSON ``arguments`` (an object, or its JSON text).

        Always returns a strict-JSON object no longer than ``limits.max_result_chars``:
        ``{"ok": true, "tool", "truncated", "result"}`` or ``{"ok": false, "tool",
        "truncated", "error": {"code", "message", "details"?}}``. Never raises, except
        ``KeyboardInterrupt``/``SystemExit`` raised in the host.
        """
        name = tool if isinstance(tool, str) else clip(repr(tool), 100)
        limit = self.limits.max_result_chars
        try:
            handler = self._handlers.get(name)
            if handler is None:
                raise ToolError(
                    ErrorCode.UNKNOWN_TOOL,
                    f"there is no tool named {clip(name, 100)!r}",
                    {"tools": list(TOOL_NAMES)},
                )
            args = parse_arguments(arguments)
            self._validate(name, args)
            return success(name, handler(args), limit)
        except ToolError as exc:
            return failure(name, exc.code, exc.message, exc.details, max_chars=limit)
        except Exception as exc:
            log.warning("dlopt agent tool %s failed", name, exc_info=True)
            return failure(
                name,
                ErrorCode.INTERNAL_ERROR,
                f"{type(exc).__name__}: {clip(exc, 500)}",
                max_chars=limit,
            )

    def _validate(self, tool: str, args: dict[str, Any]) -> None:
        errors = list(itertools.islice(self._validators[tool].iter_errors(args), 20))
        if not errors:
            return
        errors.sort(key=lambda e: [str(p) for p in e.absolute_path])
        problems = [
            f"{'.'.join(str(p) for p in e.absolute_path) or 'arguments'}: {clip(e.message, 300)}"
            for e in errors[:5]
        ]
        raise ToolError(
            ErrorCode.INVALID_ARGUMENTS,
            "; ".join(problems),
            {"schema": f"the input schema of {tool} (OptimizationAgentToolkit.tool_schemas)"},
        )

    def _workload(self, name: str) -> _Workload:
        with self._lock:
            found = self._workloads.get(name)
            known = sorted(self._workloads)
        if found is None:
            raise ToolError(
                ErrorCode.UNKNOWN_WORKLOAD,
                f"no workload named {name!r} is registered; dlopt_list_workloads lists them",
                {"workloads": known[:50]},
            )
        return found

    # -- the tools ------------------------------------------------------------------
    def _inspect_runtime(self, args: dict[str, Any]) -> dict[str, Any]:
        optimizer = self._optimizer
        info = inspect_runtime(optimizer.target, with_providers=False)
        registry, infos = self._provider_infos()
        context = ProviderContext(target=optimizer.target, policy=optimizer.policy)
        providers = []
        # Probes import SDKs and may run kernels: never while a race is timing plans.
        with _RACE_LOCK:
            statuses = [probe_provider(i, context) for i in infos]
        for provider_info, status in zip(infos, statuses):
            try:
                role: str | None = Role.of(provider_info.provider).value
            except TypeError:
                role = None
            providers.append(views.provider_view(status, role))
        runtime = strict_jsonable(info)
        runtime.pop("providers", None)
        runtime.pop("plugin_failures", None)
        with self._lock:
            races_left = (
                None
                if self.limits.max_races is None
                else self.limits.max_races - self._races_started
            )
        policy = optimizer.policy
        return {
            "target": strict_jsonable(optimizer.target),
            "runtime": runtime,
            "providers": providers,
            "plugin_failures": [
                clip(f"{f.plugin} ({f.stage}): {f.error}", views.TEXT_LIMIT)
                for f in registry.failures
            ],
            "host_policy": {
                "objective": policy.objective.value,
                "min_speedup": policy.constraints.min_speedup,
                "include": list(policy.include) if policy.include is not None else None,
                "exclude": list(policy.exclude),
                "measurement_cap": {
                    "max_time_s": self.caps.max_time_s,
                    "min_rounds": self.caps.min_rounds,
                    "max_rounds": self.caps.max_rounds,
                },
                "min_speedup_range": [self.caps.min_speedup_floor, self.caps.min_speedup_ceiling],
                "max_call_s": self.limits.max_call_s,
                "races_left": races_left,
            },
        }

    def _provider_infos(self) -> tuple[ProviderRegistry, list[ProviderInfo]]:
        """The plans the optimizer races from: its registry, with its explicit providers
        replacing (or adding to) those of the same name."""
        registry = self._optimizer.registry
        if registry is None:
            registry = load_providers()
        return registry, with_explicit(registry.providers, self._optimizer.explicit_providers)

    def _list_workloads(self, args: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            listed = [
                views.workload_view(
                    w.name,
                    w.description,
                    w.profile,
                    optimizing=w.name in self._jobs,
                    report=self._reports.get(w.name),
                )
                for w in self._workloads.values()
            ]
        return {"workloads": listed}

    def _read_report(self, args: dict[str, Any]) -> dict[str, Any]:
        workload = self._workload(args["workload"]).name
        report = self.report(workload)
        if report is None:
            raise ToolError(
                ErrorCode.NO_DECISION,
                f"workload {workload!r} has not been optimized yet: call dlopt_optimize first",
            )
        name = args.get("candidate")
        if name is None:
            return views.report_summary(workload, report)
        try:
            cand = report.candidate(name)
        except KeyError:
            raise ToolError(
                ErrorCode.UNKNOWN_CANDIDATE,
                f"the report of {workload!r} has no candidate {name!r}",
                {"candidates": [c.name for c in report.candidates][:50]},
            ) from None
        return views.candidate_details(workload, cand)

    def _optimize(self, args: dict[str, Any]) -> dict[str, Any]:
        workload = self._workload(args["workload"])
        policy = self._policy_for(args)
        workload = self._batched_for(workload, policy, args)
        deadline = _now() + self.limits.max_call_s if self.limits.max_call_s is not None else None
        with self._lock:
            job = self._jobs.get(workload.name)
            owner = job is None
            if job is not None:
                if job.policy != policy or job.batch_sizes != workload.profile.batch_sizes:
                    raise ToolError(
                        ErrorCode.BUSY,
                        f"workload {workload.name!r} is being optimized with other settings; "
                        "wait for it and read its report with dlopt_read_report, or call again "
                        "once it is done",
                    )
                job.waiters += 1
            else:
                if (
                    self.limits.max_races is not None
                    and self._races_started >= self.limits.max_races
                ):
                    raise ToolError(
                        ErrorCode.BUDGET_EXHAUSTED,
                        f"the host allows {self.limits.max_races} races and all have been run; "
                        "read the existing reports with dlopt_read_report",
                    )
                self._races_started += 1
                job = _Job(policy, deadline, workload.profile.batch_sizes)
                self._jobs[workload.name] = job
        if not owner:
            return self._join(job)
        outcome: dict[str, Any] | ToolError = ToolError(
            ErrorCode.CANCELLED, "the host stopped this optimize call"
        )
        try:
            outcome = self._race(job, workload, policy)
        except ToolError as exc:
            outcome = exc
        except Exception as exc:
            log.warning("dlopt agent optimize of %s failed", workload.name, exc_info=True)
            outcome = ToolError(ErrorCode.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}")
        finally:
            job.outcome = outcome
            with self._lock:
                del self._jobs[workload.name]
            job.done.set()
        if isinstance(outcome, ToolError):
            raise outcome
        return {**outcome, "joined": False}

    def _join(self, job: _Job) -> dict[str, Any]:
        """Wait for the running call and return its result (or its error)."""
        try:
            job.done.wait()
        finally:
            with self._lock:
                job.waiters -= 1
        outcome = job.outcome
        if isinstance(outcome, ToolError):
            raise ToolError(outcome.code, outcome.message, outcome.details)
        assert outcome is not None
        return {**outcome, "joined": True}

    def _race(self, job: _Job, workload: _Workload, policy: Any) -> dict[str, Any]:
        try:
            while not _RACE_LOCK.acquire(timeout=_WAIT_POLL_S):
                if (stop := job.stopped()) is not None:
                    raise stop
            try:
                if (stop := job.stopped()) is not None:
                    raise stop
                # The host's optimizer (target, providers, registry, clock, observers) with
                # the agent's policy.
                optimizer = self._optimizer.with_policy(policy)
                decision = optimizer.select(
                    workload.model, workload.profile, should_continue=job.should_continue
                )
            finally:
                _RACE_LOCK.release()
        except SelectionCancelled as exc:
            stop = job.stopped() or ToolError(ErrorCode.CANCELLED, str(exc))
            raise ToolError(stop.code, f"{stop.message}: {exc}") from None
        except ConfigurationError as exc:
            raise ToolError(ErrorCode.CONFIGURATION_ERROR, str(exc)) from None
        except DloptError as exc:
            raise ToolError(ErrorCode.OPTIMIZATION_FAILED, f"{type(exc).__name__}: {exc}") from None
        measurement = decision.report.measurement
        cut_short = measurement is not None and measurement.stop_reason is StopReason.CANCELLED
        if cut_short and job.cancel_requested.is_set():
            # The host asked to stop: the decision of a race cut short is not kept.
            decision.close()
            raise ToolError(
                ErrorCode.CANCELLED,
                f"the host cancelled this optimize call during the race "
                f"(after {measurement.rounds if measurement else 0} rounds); "
                "no decision was kept",
            )
        with self._lock:
            self._reports[workload.name] = decision.report
            old = self._decisions.pop(workload.name, None)
            self._decisions[workload.name] = decision
        if old is not None:
            old.close()
        return {
            **views.report_summary(workload.name, decision.report),
            "time_limit_reached": cut_short,
        }

    def _batched_for(self, workload: _Workload, policy: Any, args: dict[str, Any]) -> _Workload:
        """The workload this call races: under ``max_throughput`` its one request at the
        asked batch sizes (the registered profile's own when none are asked)."""
        sizes = args.get("batch_sizes")
        if policy.objective is not Objective.MAX_THROUGHPUT:
            if sizes is not None:
                raise ToolError(
                    ErrorCode.INVALID_ARGUMENTS,
                    "batch_sizes are raced by objective 'max_throughput' only; set it, or "
                    "drop batch_sizes",
                )
            return workload
        try:
            profile = workload.profile.as_batched(sizes)
        except WorkloadError as exc:
            raise ToolError(
                ErrorCode.INVALID_ARGUMENTS,
                f"objective 'max_throughput' races one request of workload {workload.name!r} "
                f"at several batch sizes: {exc}",
            ) from None
        return attrs.evolve(workload, profile=profile)

    def _policy_for(self, args: dict[str, Any]) -> Any:
        """The host's policy with the agent's fields, within the host's caps."""
        host = self._optimizer.policy
        measurement = _measurement_budget(host.measurement, self.caps, args.get("measurement", {}))
        constraints = host.constraints
        if "min_speedup" in args:
            constraints = attrs.evolve(constraints, min_speedup=float(args["min_speedup"]))
        if "expected_calls" in args:
            constraints = attrs.evolve(constraints, expected_calls=int(args["expected_calls"]))
        if "max_latency_ms" in args:
            constraints = attrs.evolve(constraints, max_latency_ms=float(args["max_latency_ms"]))
        if "max_p99_latency_ms" in args:
            constraints = attrs.evolve(
                constraints, max_p99_latency_ms=float(args["max_p99_latency_ms"])
            )
        include = args.get("include")
        if include is not None:
            refused = [n for n in include if not host.wants(n)]
            if refused:
                raise ToolError(
                    ErrorCode.INVALID_ARGUMENTS,
                    f"include names {', '.join(map(repr, refused))}, which the host's policy "
                    "does not race",
                    {"host_include": host.include, "host_exclude": list(host.exclude)},
                )
        exclude = (*host.exclude, *(n for n in args.get("exclude", ()) if n not in host.exclude))
        try:
            return attrs.evolve(
                host,
                objective=args.get("objective", host.objective),
                constraints=constraints,
                measurement=measurement,
                include=tuple(include) if include is not None else host.include,
                exclude=exclude,
            )
        except ConfigurationError as exc:
            raise ToolError(ErrorCode.INVALID_ARGUMENTS, str(exc)) from None


def _check_workload_name(name: object) -> None:
    # Agents call workloads by these names: plain names only, never a path or a text blob.
    if not is_plain_name(name):
        raise ConfigurationError(f"workload name {name!r} is not a plain name: {NAME_RULE}")


def _caps(optimizer: InferenceOptimizer, limits: ToolkitLimits) -> ToolCaps:
    """The measurement budget agents may ask for: the host's caps, else its policy's."""
    measurement = optimizer.policy.measurement
    max_time_s = limits.max_measure_time_s
    if max_time_s is None:
        max_time_s = _policy_time_ceiling(measurement)
    max_rounds = limits.max_rounds if limits.max_rounds is not None else measurement.max_rounds
    if max_rounds < measurement.min_rounds:
        raise ConfigurationError(
            f"ToolkitLimits.max_rounds ({max_rounds}) is below the optimizer policy's "
            f"min_rounds ({measurement.min_rounds}): raise it or lower min_rounds"
        )
    low, high = limits.min_speedup_range
    return ToolCaps(
        max_time_s=float(max_time_s),
        min_rounds=int(measurement.min_rounds),
        max_rounds=int(max_rounds),
        min_speedup_floor=float(low),
        min_speedup_ceiling=float(high),
    )


def _policy_time_ceiling(measurement: Any) -> float:
    """The most measurement time a policy can spend: its ``max_time_s``, or, when it
    scales the budget to the model (``max_time_s=None``), the ceiling of that scaling."""
    if measurement.max_time_s is not None:
        return float(measurement.max_time_s)
    ceiling = getattr(measurement, "auto_budget_max_s", None)
    if ceiling is None:
        raise ConfigurationError(
            "the optimizer policy sets no measurement time limit: set "
            "ToolkitLimits(max_measure_time_s=...)"
        )
    return float(ceiling)


def _measurement_budget(measurement: Any, caps: ToolCaps, asked: Mapping[str, Any]) -> Any:
    """The host's measurement policy with the agent's budget, never above the caps."""
    changes: dict[str, Any] = {"max_rounds": int(asked.get("max_rounds", caps.max_rounds))}
    if "max_time_s" in asked:
        changes["max_time_s"] = float(asked["max_time_s"])
    elif _policy_time_ceiling(measurement) > caps.max_time_s:
        changes["max_time_s"] = caps.max_time_s
    return attrs.evolve(measurement, **changes)
