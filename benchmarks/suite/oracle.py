"""The oracle's plans: each plan dlopt validated or did not build, built to be timed at length.

Where practical a plan is built here, independently of dlopt's providers, the way a user
would write it with plain torch: eager fp32, channels-last, bf16/fp16 autocast (with and
without channels-last) and torch.compile (default mode, with freezing, after an FX
Conv-BN fusion). Every other plan (ONNX Runtime, TorchAO, the composed plans) is built
through dlopt's own provider, probed, built, first-called and validated as in a race,
and the table says so (``built = "provider"``). The peer's ``fx`` pick is its own graph
rewrite, built with the peer's code (``built = "peer"``).

A plan no dlopt run validated (one a run did not build: pruned by its prior, or no time
left) is built through dlopt's provider, which validates it as a race would: a plan that
fails validation is reported like one that cannot be built, so the best plan the oracle
times is always one dlopt could have picked.

A plan the oracle cannot build is reported with the error; the others are timed.
"""

from __future__ import annotations

import copy
import tempfile
from collections.abc import Callable, Collection, Sequence
from contextlib import nullcontext, suppress
from typing import Any

import torch
from torch import nn

from .models import Case

Call = Callable[[], object]
#: plan name -> how the oracle built it, and one zero-argument call per case.
BuiltCalls = tuple[str, dict[str, Call]]


def _channels_last(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.dim() == 4:
        return value.contiguous(memory_format=torch.channels_last)
    return value


def _calls(
    module: Callable[..., Any],
    cases: Sequence[Case],
    *,
    autocast: torch.dtype | None = None,
    channels_last: bool = False,
) -> dict[str, Call]:
    """One call per case: inference mode, optional autocast; channels-last inputs are
    converted inside the call (a served plan receives the user's contiguous tensors)."""

    def make(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Call:
        def call() -> object:
            a, k = args, kwargs
            if channels_last:
                a = tuple(_channels_last(v) for v in a)
                k = {key: _channels_last(v) for key, v in k.items()}
            region = (
                torch.autocast("cpu", dtype=autocast) if autocast is not None else nullcontext()
            )
            with torch.inference_mode(), region:
                return module(*a, **k)

        return call

    return {name: make(args, kwargs) for name, args, kwargs, _ in cases}


#: core's native plans, rebuilt here as autocast and/or channels-last.
NATIVE_PLANS = frozenset(
    f"native_{variant}"
    for variant in ("channels_last", "bf16", "fp16", "bf16_channels_last", "fp16_channels_last")
)


def _native(model: nn.Module, cases: Sequence[Case], name: str) -> dict[str, Call]:
    dtype = torch.bfloat16 if "bf16" in name else torch.float16 if "fp16" in name else None
    channels_last = name.endswith("channels_last")
    module = copy.deepcopy(model)
    if channels_last:
        module = module.to(memory_format=torch.channels_last)
    return _calls(module, cases, autocast=dtype, channels_last=channels_last)


def _compiled(
    model: nn.Module, cases: Sequence[Case], *, freezing: bool, fx_fuse: bool
) -> dict[str, Call]:
    module = copy.deepcopy(model)
    if fx_fuse:
        from torch.fx.experimental.optimization import fuse

        module = fuse(module)
    # Static shapes: each case compiles its own graph, the fastest a compiled plan can be.
    # (torch.compile takes a mode or options, not both: only the default mode is rebuilt.)
    compiled = torch.compile(module, dynamic=False, options={"freezing": freezing})
    return _calls(compiled, cases)


def _compile_settings(name: str, options: dict[str, Any] | None) -> dict[str, Any] | None:
    """How to rebuild dlopt-fx's fp32 Inductor plans (None: not one of them)."""
    defaults = {
        "inductor": {"freezing": False, "fx_fuse": False},
        "inductor_freezing": {"freezing": True, "fx_fuse": False},
        "fx_inductor": {"freezing": False, "fx_fuse": True},
    }
    if name not in defaults:
        return None
    options = options or {}
    if options.get("mode") not in (None, "default"):
        return None  # an autotuning mode: built through the provider
    settings = dict(defaults[name])
    if options.get("freezing") is not None:
        settings["freezing"] = bool(options["freezing"])
    return settings


def build_independent(
    name: str, options: dict[str, Any] | None, model: nn.Module, cases: Sequence[Case]
) -> dict[str, Call] | None:
    """The plan built with plain torch, or None where the suite has no builder for it."""
    if name == "eager_fp32":
        return _calls(model, cases)
    if name in NATIVE_PLANS:
        return _native(model, cases, name)
    settings = _compile_settings(name, options)
    if settings is not None:
        return _compiled(model, cases, **settings)
    return None


def build_peer_fx(model: nn.Module, cases: Sequence[Case]) -> dict[str, Call]:
    """The peer's ``fx`` plan: its own symbolic trace with Conv-BN folding (its ReLU
    replacement falls back to ``F.relu`` off CUDA)."""
    from custom_dl_optimizer.core.graph_surgeon import optimize_graph

    module, report = optimize_graph(copy.deepcopy(model))
    if not report.traced:
        raise RuntimeError(f"the peer's FX trace failed: {report.error}")
    return _calls(module.eval(), cases)


class ProviderPlans:
    """Builds plans through dlopt's providers, as a race would (probe, build, first calls,
    validation), one at a time; ``close()`` releases them."""

    def __init__(self, model: nn.Module, cases: Sequence[Case]) -> None:
        from dlopt.plugins.discovery import load_providers
        from dlopt.settings.target import ExecutionTarget
        from dlopt.settings.workload import WorkloadCase, WorkloadProfile

        self.model = model
        self.registry = load_providers()
        self.target = ExecutionTarget("cpu")
        self.workload = WorkloadProfile(
            name="oracle",
            cases=tuple(
                WorkloadCase(name, args=args, kwargs=kwargs, weight=weight)
                for name, args, kwargs, weight in cases
            ),
        )
        self.tmp = tempfile.TemporaryDirectory(prefix="dlopt-oracle-")
        self.plans: list[Any] = []

    def build(self, name: str) -> dict[str, Call]:
        from dlopt.contract.provider import ProviderContext
        from dlopt.measurement import MonotonicClock
        from dlopt.pipeline import ground_truth
        from dlopt.pipeline.plans import choose_plans
        from dlopt.pipeline.prepare import prepare_plans
        from dlopt.pipeline.state import SelectionContext
        from dlopt.settings.policy import OptimizationPolicy

        policy = OptimizationPolicy(include=(name,))
        candidates = choose_plans(self.registry, (), policy)
        cand = next((c for c in candidates if c.name == name), None)
        if cand is None:
            raise RuntimeError(f"no installed provider is named {name!r}")
        run = SelectionContext(policy, self.target, MonotonicClock(), lambda event: None)
        truth = ground_truth.capture(self.model, self.workload, run)
        reference = truth.reference
        context = ProviderContext(
            target=self.target, policy=policy, workload=truth.workload, artifact_dir=self.tmp.name
        )
        prepare_plans([cand], self.model, context, reference, truth.guard, run)
        if not cand.alive:
            why = cand.error.message if cand.error else None
            if why is None and cand.status is not None:
                why = cand.status.availability.reason
            raise RuntimeError(f"the provider did not give a valid plan: {why}")
        self.plans.append(cand.plan)
        runner = cand.plan.runner
        sync = cand.plan.synchronize

        def make(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Call:
            def call() -> object:
                # As dlopt calls it: in the workload's calling context, on its inputs.
                with reference.calling_context():
                    out = runner(*args, **kwargs)
                if sync is not None:
                    sync()
                return out

            return call

        return {case.name: make(case.args, case.kwargs) for case in reference.cases}

    def close(self) -> None:
        for plan in self.plans:
            with suppress(Exception):  # releasing is best effort
                plan.close()
        self.tmp.cleanup()


def build_all(
    model: nn.Module,
    cases: Sequence[Case],
    plans: Sequence[tuple[str, dict[str, Any] | None]],
    *,
    peer_fx: bool,
    warmup_calls: int = 2,
    unvalidated: Collection[str] = (),
) -> tuple[dict[str, BuiltCalls], dict[str, str], ProviderPlans]:
    """Build every plan (then call each case ``warmup_calls`` times: lazy compilation is
    not timed). Plans in ``unvalidated`` (no dlopt run validated them: they were not
    built) are built through dlopt's provider, which validates them as a race would.
    Returns the built plans, the failures (name -> error) and the provider builder to
    close when timing is over."""
    built: dict[str, BuiltCalls] = {}
    failures: dict[str, str] = {}
    providers = ProviderPlans(model, cases)
    wanted: list[tuple[str, dict[str, Any] | None]] = list(plans)
    if peer_fx:
        wanted.append(("peer_fx", None))
    for name, options in wanted:
        try:
            if name == "peer_fx":
                built[name] = ("peer", _warm(build_peer_fx(model, cases), warmup_calls))
                continue
            how = "provider"
            if name not in unvalidated:
                try:
                    independent = build_independent(name, options, model, cases)
                    if independent is not None:
                        built[name] = ("independent", _warm(independent, warmup_calls))
                        continue
                except Exception as exc:
                    how = f"provider (own build failed: {type(exc).__name__})"
            built[name] = (how, _warm(providers.build(name), warmup_calls))
        except Exception as exc:
            failures[name] = f"{type(exc).__name__}: {exc}"[:400]
    return built, failures, providers


def _warm(calls: dict[str, Call], times: int) -> dict[str, Call]:
    """Call every case ``times`` times (lazy compilation happens here, untimed)."""
    for call in calls.values():
        for _ in range(times):
            call()
    return calls
