"""A fake-clock race builder: selections with fake providers that finish instantly and exactly.

    race = FakeRace()
    decision = race.optimizer(race.fake("eager_fp32", 2e-3), race.fake("fast", 1e-3)) \
        .select_signature(model, x)

Every fake plan advances one :class:`~dlopt.measurement.FakeClock` by its latency (with a
small seeded jitter), so the statistics see realistic spread and the test never sleeps.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

from dlopt.api.optimizer import InferenceOptimizer
from dlopt.contract.provider import Role
from dlopt.measurement import FakeClock, MeasurementPolicy
from dlopt.plugins.discovery import PluginSettings, load_providers
from dlopt.settings.policy import DeploymentConstraints, OptimizationPolicy
from dlopt.testing.fakes import FakeProvider
from dlopt.validation import QualityPolicy


class FakeRace:
    """Builds optimizers whose providers are fakes advancing one fake clock."""

    def __init__(self, seed: int = 1234) -> None:
        self.clock = FakeClock()
        self.rng = random.Random(seed)

    def jitter(self, base_s: float, spread: float = 0.02) -> Callable[[int], float]:
        """A latency function: ``base_s`` times a seeded uniform factor in ``1 ± spread``."""
        rng = random.Random(self.rng.random())
        return lambda call: base_s * (1.0 + rng.uniform(-spread, spread))

    def fake(self, name: str, latency_s: float, **kwargs: Any) -> FakeProvider:
        """A :class:`FakeProvider` on this race's clock.

        For brevity in tests, a fake named ``eager_fp32`` stands in for the reference plan
        and one named ``native_*`` declares the native role, unless ``role`` is given.
        """
        if "role" not in kwargs:
            if name == "eager_fp32":
                kwargs["role"] = Role.REFERENCE
            elif name.startswith("native_"):
                kwargs["role"] = Role.NATIVE
        return FakeProvider(
            name, latency_s=self.jitter(latency_s), advance=self.clock.advance, **kwargs
        )

    def optimizer(
        self,
        *providers: Any,
        objective: str = "steady_state_latency",
        constraints: DeploymentConstraints | None = None,
        include: Sequence[str] | None = None,
        quality: QualityPolicy | None = None,
        time_budget_s: float | str | None = None,
        exhaustive: bool = False,
        **measurement: Any,
    ) -> InferenceOptimizer:
        """An optimizer racing exactly ``providers`` (built-ins are loaded but not included).

        No time budget unless ``time_budget_s`` sets one: a fake race times the race, and
        the automatic budget would read the real model's call time against a fake clock."""
        measurement.setdefault("seed", 7)
        measurement.setdefault("max_time_s", 20.0)
        measurement.setdefault("bootstrap_resamples", 0)
        policy = OptimizationPolicy(
            objective=objective,
            constraints=constraints or DeploymentConstraints(),
            measurement=MeasurementPolicy(**measurement),
            include=tuple(include) if include is not None else tuple(p.name for p in providers),
            quality=quality if quality is not None else QualityPolicy(),
            time_budget_s=time_budget_s,
            exhaustive=exhaustive,
        )
        registry = load_providers(PluginSettings(autoload=False))
        return InferenceOptimizer("cpu", policy, providers, registry=registry, clock=self.clock)
