"""Fake providers with programmable speed, precision and failure, for pipeline tests.

A fake plan computes the real model's output (so validation sees real numbers) and then
"takes" ``latency_s``: with ``advance`` set (a fake clock's advance function) time passes
only on that clock, so races are exact and instant; without it the fake sleeps.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
from attrs import define, field

from dlopt.contract.priors import Prior
from dlopt.contract.provider import (
    BuiltPlan,
    ProviderAvailability,
    ProviderContext,
    Role,
    ServingTraits,
    _precision,
)
from dlopt.errors import PlanNotApplicable
from dlopt.platform.tree import map_tensors
from dlopt.precision import Precision, Quantization
from dlopt.vocabulary import TextEnum

#: The real pause between two slices of a build spent in ``build_steps`` slices.
BUILD_STEP_PAUSE_S = 0.002


class FailingStage(TextEnum):
    """Where a fake provider fails on purpose."""

    NONE = "none"
    PROBE = "probe"  # probe reports unavailable
    PROBE_RAISES = "probe_raises"
    BUILD = "build"
    NOT_APPLICABLE = "not_applicable"  # build says the plan does not apply to the workload
    FIRST_CALL = "first_call"
    VALIDATION = "validation"  # outputs are wrong by ``error_scale``
    MEASURE = "measure"  # raises after ``fail_after_calls`` calls
    MUTATE_MODEL = "mutate_model"  # modifies the caller's weights in build
    MUTATE_WHEN_MEASURED = "mutate_when_measured"  # modifies them after ``fail_after_calls``
    STALE_OUTPUTS = "stale_outputs"  # right on each case's first call, zeros afterwards
    MUTATE_INPUTS = "mutate_inputs"  # zeroes its floating-point tensor inputs on every call
    NONFINITE = "nonfinite"  # returns NaN from call ``fail_after_calls + 1`` on


@define
class FakeProvider:
    """A provider whose plan is the real model plus programmable cost and faults."""

    name: str
    latency_s: float | Callable[[int], float] = 1e-3
    precision: Precision = field(default=Precision.FP32, converter=_precision)
    role: Role = field(default=Role.CHALLENGER, converter=Role)
    #: How an integer plan declares it scales activations (``None``: not declared).
    quantization: Quantization | None = field(
        default=None, converter=lambda value: None if value is None else Quantization(value)
    )
    setup_time_s: float = 0.0
    #: In how many slices the build spends ``setup_time_s`` on a fake clock, each after a
    #: real pause of :data:`BUILD_STEP_PAUSE_S`: a build a watchdog can see in progress.
    build_steps: int = 1
    first_call_time_s: float = 0.0
    fail: FailingStage = field(default=FailingStage.NONE, converter=FailingStage)
    error_scale: float = 0.1
    fail_after_calls: int = 5
    advance: Callable[[float], None] | None = None
    #: Per-case latency multiplier keyed by the batch size of the first tensor argument.
    per_batch_scale: dict[int, float] = field(factory=dict)
    #: What the built plan declares about being served.
    serving: ServingTraits = field(factory=ServingTraits)
    #: The prior its ``prior(context)`` declares (``None``: dlopt's own).
    declared_prior: Prior | None = None
    builds: int = field(default=0, init=False)
    #: Builds that returned (or raised their programmed fault), not abandoned midway.
    builds_finished: int = field(default=0, init=False)
    closes: int = field(default=0, init=False)
    #: Per call: (inference mode on, autograd on, first tensor input is an inference tensor).
    contexts: list[tuple[bool, bool, bool]] = field(factory=list, init=False)

    def _spend(self, seconds: float) -> None:
        if seconds <= 0:
            return
        if self.advance is not None:
            self.advance(seconds)
        else:
            time.sleep(seconds)

    def prior(self, context: ProviderContext) -> Prior | None:
        return self.declared_prior

    def probe(self, context: ProviderContext) -> ProviderAvailability:
        if self.fail is FailingStage.PROBE_RAISES:
            raise RuntimeError("fake probe exploded")
        if self.fail is FailingStage.PROBE:
            return ProviderAvailability.unavailable(
                "fake SDK missing", install_hint="pip install fake-sdk"
            )
        return ProviderAvailability.ok(sdk_versions={"fake-sdk": "1.0"})

    def build(self, model: torch.nn.Module, context: ProviderContext) -> BuiltPlan:
        self.builds += 1
        for step in range(self.build_steps):
            if step:
                time.sleep(BUILD_STEP_PAUSE_S)
            self._spend(self.setup_time_s / self.build_steps)
        self.builds_finished += 1
        if self.fail is FailingStage.BUILD:
            raise RuntimeError("fake build failed: unsupported operator aten::fake")
        if self.fail is FailingStage.NOT_APPLICABLE:
            raise PlanNotApplicable("the fake layout needs image inputs; this workload has none")
        if self.fail is FailingStage.MUTATE_MODEL:
            with torch.no_grad():
                next(model.parameters()).add_(1.0)
        calls = 0
        provider = self
        served: set[tuple[int, ...]] = set()  # input shapes already called (stale outputs)

        def runner(*args: Any, **kwargs: Any) -> Any:
            nonlocal calls
            calls += 1
            if calls == 1:
                if provider.fail is FailingStage.FIRST_CALL:
                    raise RuntimeError("fake first call failed: kernel not found")
                provider._spend(provider.first_call_time_s)
            if provider.fail is FailingStage.MEASURE and calls > provider.fail_after_calls:
                raise RuntimeError(f"fake plan crashed on call {calls}")
            if (
                provider.fail is FailingStage.MUTATE_WHEN_MEASURED
                and calls == provider.fail_after_calls + 1
            ):
                with torch.no_grad():
                    next(model.parameters()).mul_(2.0)
            out = model(*args, **kwargs)
            first = next((a for a in args if isinstance(a, torch.Tensor) and a.dim() > 0), None)
            provider.contexts.append(
                (
                    torch.is_inference_mode_enabled(),
                    torch.is_grad_enabled(),
                    bool(first is not None and first.is_inference()),
                )
            )
            if provider.fail is FailingStage.NONFINITE and calls > provider.fail_after_calls:
                out = map_tensors(lambda t: torch.full_like(t, float("nan")), out)
            if provider.fail is FailingStage.MUTATE_INPUTS:
                for arg in args:
                    if isinstance(arg, torch.Tensor) and arg.is_floating_point():
                        arg.mul_(0)
            if provider.fail is FailingStage.STALE_OUTPUTS:
                shape = tuple(first.shape) if first is not None else ()
                if shape in served:
                    out = map_tensors(torch.zeros_like, out)
                served.add(shape)
            latency = (
                provider.latency_s(calls) if callable(provider.latency_s) else provider.latency_s
            )
            if first is not None:
                latency *= provider.per_batch_scale.get(int(first.shape[0]), 1.0)
            provider._spend(latency)
            if provider.fail is FailingStage.VALIDATION:
                out = map_tensors(
                    lambda t: (
                        t + provider.error_scale * t.abs().mean() if t.is_floating_point() else t
                    ),
                    out,
                )
            return out

        def on_close() -> None:
            provider.closes += 1

        return BuiltPlan(
            runner=runner,
            precision=self.precision,
            on_close=on_close,
            metadata={"fake": True},
            serving=self.serving,
        )
