"""The example's plans in a real race: asynchronous work is waited for before it is judged.

With ``TINYNPU_LAUNCH=deferred`` a queued call runs only when the plan's
``synchronize()`` is called, and its outputs hold NaN until then. A race that read outputs
or stopped a timer without synchronizing would reject the plans or time only the enqueue;
the clock below also checks, at every reading, that no call of these plans is still
queued.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest
import tinynpu
import torch
from dlopt_example_npu.provider import ExampleNpuFastProvider, ExampleNpuProvider

from dlopt import InferenceOptimizer, OptimizationPolicy
from dlopt.engine.decision import OptimizationDecision
from dlopt.measurement import MeasurementPolicy, MonotonicClock
from dlopt.plugin import BuiltPlan, ExecutionTarget, PreparedCase, ProviderContext
from dlopt.testing.fake_race import FakeRace
from dlopt.testing.models import SmallConvNet

PLANS = ("examplenpu_fp32", "examplenpu_fast")


def _conv_net() -> torch.nn.Module:
    """dlopt's small conv net (conv, batch norm, pooled linear head): seeded, in eval mode."""
    torch.manual_seed(0)
    return SmallConvNet().eval()


class Opened:
    """The tinynpu devices the race's plans opened."""

    def __init__(self) -> None:
        self.devices: list[tinynpu.Device] = []

    def queued(self) -> int:
        return sum(d.pending_calls() for d in self.devices if not d.closed)


class CheckingClock(MonotonicClock):
    """The real clock, counting the readings taken while a plan's call was still queued."""

    def __init__(self, opened: Opened) -> None:
        super().__init__()
        self.opened = opened
        self.readings = 0
        self.readings_while_queued = 0

    def now_ns(self) -> int:
        self.readings += 1
        if self.opened.queued():
            self.readings_while_queued += 1
        return super().now_ns()


def _recording(provider_type: type[ExampleNpuProvider], opened: Opened, *, sync: bool = True):
    """The provider, recording the device each plan opens (and, for the negative control,
    dropping the plan's ``synchronize``)."""

    class Recording(provider_type):  # type: ignore[misc, valid-type]
        def build(self, model: torch.nn.Module, context: ProviderContext) -> BuiltPlan:
            plan = super().build(model, context)
            opened.devices.append(plan.runner.device)
            return plan if sync else attrs.evolve(plan, synchronize=None)

    return Recording()


def _race(
    opened: Opened,
    providers: list[Any],
    tmp_path: Path,
    target: ExecutionTarget | str = "cpu",
    **policy: Any,
) -> Any:
    """Race ``providers`` (and the reference) on one batch of a small conv net."""
    clock = CheckingClock(opened)
    optimizer = InferenceOptimizer(
        target,
        OptimizationPolicy(
            include=tuple(p.name for p in providers),
            measurement=MeasurementPolicy(max_time_s=1.0, seed=3),
            exhaustive=True,  # the NPU plan races, whatever a time budget would say
            **policy,
        ),
        providers,
        clock=clock,
        artifact_dir=tmp_path / "artifacts",
    )
    gen = torch.Generator().manual_seed(0)
    decision = optimizer.select_signature(_conv_net(), torch.randn(2, 3, 12, 12, generator=gen))
    return decision, clock


@pytest.fixture
def deferred(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(tinynpu.LAUNCH_ENV, "deferred")


def test_race_synchronizes_before_validating_and_before_every_timer_stop(
    deferred: None, tmp_path: Path
) -> None:
    opened = Opened()
    providers = [
        _recording(ExampleNpuProvider, opened),
        _recording(ExampleNpuFastProvider, opened),
    ]
    options = {"examplenpu_fast": {"worker_threads": 2, "optimize_numerics": False}}
    # The host-side NPU target: plans compute on tinynpu0, the model and inputs stay on
    # the host (the reference runs there).
    target = ExecutionTarget("tinynpu:0", host="cpu")
    decision, clock = _race(opened, providers, tmp_path, target, plan_options=options)
    with decision:
        candidates = {c.name: c for c in decision.report.candidates}
        for name in PLANS:
            evidence = candidates[name]
            assert evidence.error is None, f"{name}: {evidence.error}"
            assert evidence.status in {"selected", "lost", "baseline"}
            assert evidence.revalidation is not None and evidence.revalidation.passed
            assert evidence.latency_ms is not None and evidence.latency_ms > 0
            # The SDK's own figure: the program's weights at least.
            assert evidence.device_memory_mb is not None and evidence.device_memory_mb > 0
            assert evidence.metadata["launch"] == "deferred"
        assert candidates["examplenpu_fast"].options == {
            "worker_threads": 2,
            "queue_depth": 16,
            "optimize_numerics": False,
        }
        assert candidates["examplenpu_fp32"].options == {"worker_threads": 1, "queue_depth": 16}
    assert clock.readings > 0
    assert clock.readings_while_queued == 0, "a timer was read while plan work was queued"


def test_a_plan_without_its_synchronize_is_rejected(deferred: None, tmp_path: Path) -> None:
    """The negative control: the same plan, its ``synchronize`` dropped, never validates."""
    opened = Opened()
    decision, clock = _race(opened, [_recording(ExampleNpuProvider, opened, sync=False)], tmp_path)
    with decision:
        evidence = {c.name: c for c in decision.report.candidates}["examplenpu_fp32"]
        assert evidence.status == "rejected"
        assert evidence.error is not None and evidence.error.stage == "validation"
    assert clock.readings_while_queued > 0


def test_a_served_decision_returns_finished_outputs(deferred: None, tmp_path: Path) -> None:
    """Serving is a call too: the decision waits for the plan's queued work."""
    model, x = _conv_net(), torch.randn(2, 3, 12, 12)
    race = FakeRace()
    report = race.optimizer(race.fake("eager_fp32", 1e-3)).select_signature(model, x).report
    with torch.inference_mode():
        case = PreparedCase("batch-2", (x,), {}, model(x))
    plan = ExampleNpuFastProvider().build(
        model, ProviderContext(artifact_dir=tmp_path, cases=(case,))
    )
    with OptimizationDecision(plan, report) as served:
        out = served(x)  # this shape was specialized at build: the call is queued
        torch.testing.assert_close(out, case.reference)
