"""Fixtures for end-to-end selection with fake providers on a fake clock (exact, instant)."""

from __future__ import annotations

import random

import pytest
import torch

from dlopt import InferenceOptimizer, OptimizationPolicy
from dlopt.measurement import FakeClock, MeasurementPolicy
from dlopt.policy import DeploymentConstraints
from dlopt.providers.loader import PluginSettings, load_providers
from dlopt.testing import FakeProvider


class Race:
    """Builds an optimizer whose providers are fakes advancing one fake clock."""

    def __init__(self) -> None:
        self.clock = FakeClock()
        self.rng = random.Random(1234)

    def jitter(self, base_s: float, spread: float = 0.02):
        rng = random.Random(self.rng.random())
        return lambda call: base_s * (1.0 + rng.uniform(-spread, spread))

    def fake(self, name: str, latency_s: float, **kwargs) -> FakeProvider:
        return FakeProvider(
            name, latency_s=self.jitter(latency_s), advance=self.clock.advance, **kwargs
        )

    def optimizer(
        self,
        *providers: FakeProvider,
        objective: str = "steady_state_latency",
        constraints: DeploymentConstraints | None = None,
        **measurement,
    ) -> InferenceOptimizer:
        measurement.setdefault("seed", 7)
        measurement.setdefault("max_time_s", 20.0)
        measurement.setdefault("bootstrap_resamples", 0)
        policy = OptimizationPolicy(
            objective=objective,
            constraints=constraints or DeploymentConstraints(),
            measurement=MeasurementPolicy(**measurement),
            include=tuple(p.name for p in providers),
        )
        registry = load_providers(PluginSettings(autoload=False))
        return InferenceOptimizer("cpu", policy, providers, registry=registry, clock=self.clock)


@pytest.fixture
def race() -> Race:
    return Race()


@pytest.fixture
def x() -> torch.Tensor:
    return torch.randn(4, 16, generator=torch.Generator().manual_seed(3))
