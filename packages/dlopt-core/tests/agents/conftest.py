"""Toolkits over fake races (fake providers on a fake clock: exact and instant)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

from dlopt.agents import OptimizationAgentToolkit, ToolkitLimits
from dlopt.testing.fake_race import FakeRace
from dlopt.testing.fakes import FakeProvider
from dlopt.testing.models import StructuredMLP

#: A small measurement budget: fake races resolve a 2x speedup in a few rounds.
BUDGET = {"max_time_s": 5.0, "min_rounds": 3, "max_rounds": 12}


class GatedProvider:
    """A fake provider whose build waits for ``gate``: holds a race open for as long as
    a test needs (``started`` is set once the build is waiting)."""

    def __init__(self, inner: FakeProvider) -> None:
        self.inner = inner
        self.name = inner.name
        self.precision = inner.precision
        self.role = inner.role
        self.started = threading.Event()
        self.gate = threading.Event()

    def probe(self, context: Any) -> Any:
        return self.inner.probe(context)

    def build(self, model: torch.nn.Module, context: Any) -> Any:
        self.started.set()
        assert self.gate.wait(30), "the test never opened the gate"
        return self.inner.build(model, context)


Factory = Callable[..., tuple[OptimizationAgentToolkit, FakeRace, dict[str, Any]]]


@pytest.fixture
def make_toolkit() -> Iterator[Factory]:
    """``make_toolkit(limits=None, gated=False, observers=(), **measurement)`` ->
    (toolkit, race, providers): a toolkit whose optimizer races a fake eager_fp32 (2 ms)
    against "fast" (1 ms), with workload ``w`` registered (StructuredMLP on a (4, 16)
    input). ``gated``: True (or ``"fast"``) gates fast's build, ``"eager_fp32"`` the
    reference's; ``observers``: the host optimizer's observers."""
    made: list[OptimizationAgentToolkit] = []

    def make(
        limits: ToolkitLimits | None = None,
        *,
        gated: bool | str = False,
        observers: tuple[Callable[[Any], None], ...] = (),
        **measurement: Any,
    ) -> tuple[OptimizationAgentToolkit, FakeRace, dict[str, Any]]:
        race = FakeRace()
        eager: Any = race.fake("eager_fp32", 2e-3)
        fast: Any = race.fake("fast", 1e-3)
        if gated in (True, "fast"):
            fast = GatedProvider(fast)
        elif gated == "eager_fp32":
            eager = GatedProvider(eager)
        optimizer = race.optimizer(eager, fast, **{**BUDGET, **measurement})
        optimizer.observers = observers
        toolkit = OptimizationAgentToolkit(optimizer, limits)
        made.append(toolkit)
        x = torch.randn(4, 16, generator=torch.Generator().manual_seed(3))
        toolkit.register_workload("w", StructuredMLP(), x, description="a small MLP, batch 4")
        return toolkit, race, {"eager_fp32": eager, "fast": fast}

    yield make
    for toolkit in made:
        toolkit.close()
