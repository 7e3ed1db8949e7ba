"""A simulated machine for testing and benchmarking the race engine without a real clock.

Each simulated call advances a ``FakeClock`` by ``latency x factors``:

* slow drift common to everything running at that time: ``1 + A sin(2 pi t / P + phase)``;
* an optional step: from ``step_at_s`` on, every call is ``step_factor`` times slower;
* per-call jitter ``exp(N(0, jitter))`` (about ±1-3% at the default 2%);
* rare spikes: with ``spike_probability`` a call costs ``spike_factor`` times more;
* interference when plans alternate: the first calls after another plan ran pay
  ``1 + switch_penalty x switch_decay^j`` (j = calls since the switch), the way a previous
  plan's thread pool and allocator state slow the next one on a CPU;
* turn-to-turn variation: each turn of a plan (calls since another plan ran) draws one
  factor ``exp(N(0, turn_jitter))`` for all its calls (thread placement, cache state),
  which the pairing of a round cannot cancel;
* contention (bimodal calls): with ``preempt_probability`` a call is preempted and pays an
  extra ``Exp(mean = preempt_delay)`` times its latency, as when another process takes a
  core from an OpenMP team on a shared 2-core machine.

``run_simulated_race`` and ``run_simulated_fixed`` give the race engine and the fixed peer
protocol the same machine, so tests and ``benchmarks/measurement_kernel.py`` share them.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence

from attrs import evolve, frozen

from dlopt.measurement.clock import FakeClock
from dlopt.measurement.race import run_race
from dlopt.measurement.results import RaceResult
from dlopt.measurement.sequential import KnownSpread
from dlopt.settings.measurement import MeasurementPolicy
from dlopt.testing.back_to_back import BackToBackResult, back_to_back_protocol


@frozen
class NoiseModel:
    """Parameters of the simulated machine (see the module docstring)."""

    jitter: float = 0.02
    spike_probability: float = 0.01
    spike_factor: float = 1.2
    drift_amplitude: float = 0.10
    drift_period_s: float = 1.0
    switch_penalty: float = 0.3
    switch_decay: float = 0.2
    step_at_s: float | None = None
    step_factor: float = 1.0
    preempt_probability: float = 0.0
    preempt_delay: float = 0.0
    turn_jitter: float = 0.0


class SimulatedMachine:
    """A fake clock plus plans whose calls cost simulated time (no real work is done)."""

    def __init__(
        self, noise: NoiseModel | None = None, seed: int = 0, resolution_ns: int = 1
    ) -> None:
        self.noise = noise if noise is not None else NoiseModel()
        self.clock = FakeClock(resolution_ns=resolution_ns)
        self._rng = random.Random(seed)
        self._phase = self._rng.uniform(0.0, 2.0 * math.pi)
        self._last_plan: str | None = None
        self._since_switch = 0
        self._turn = 1.0
        self.calls = 0

    def factor(self, plan: str) -> float:
        """The multiplicative cost of the next call of ``plan`` (advances switch state)."""
        n, rng = self.noise, self._rng
        t = self.clock.elapsed_s
        f = 1.0 + n.drift_amplitude * math.sin(2.0 * math.pi * t / n.drift_period_s + self._phase)
        if n.step_at_s is not None and t >= n.step_at_s:
            f *= n.step_factor
        f *= math.exp(rng.gauss(0.0, n.jitter))
        if rng.random() < n.spike_probability:
            f *= n.spike_factor
        if n.preempt_probability and rng.random() < n.preempt_probability:
            f *= 1.0 + rng.expovariate(1.0 / n.preempt_delay)
        if plan != self._last_plan:
            self._last_plan, self._since_switch = plan, 0
            self._turn = math.exp(rng.gauss(0.0, n.turn_jitter)) if n.turn_jitter else 1.0
        f *= self._turn
        f *= 1.0 + n.switch_penalty * n.switch_decay**self._since_switch
        self._since_switch += 1
        return f

    def plan(self, name: str, latency_s: float) -> Callable[[], None]:
        """A zero-argument callable: one call of ``name`` lasting about ``latency_s``."""

        def call() -> None:
            self.calls += 1
            self.clock.advance(latency_s * self.factor(name))

        return call

    def candidates(
        self, latencies: Mapping[str, Sequence[float]]
    ) -> dict[str, list[Callable[[], None]]]:
        """``{plan: [callable per case]}`` for ``{plan: [latency per case, seconds]}``."""
        return {
            name: [self.plan(name, lat) for lat in per_case] for name, per_case in latencies.items()
        }


def run_simulated_race(
    latencies: Mapping[str, Sequence[float]],
    *,
    baseline: str,
    min_speedup: float,
    policy: MeasurementPolicy,
    noise: NoiseModel | None = None,
    seed: int = 0,
    weights: Sequence[float] | None = None,
    resolution_ns: int = 1,
    natives: Sequence[str] = (),
    known_spreads: Mapping[str, KnownSpread] | None = None,
) -> RaceResult:
    """One race on a fresh simulated machine (machine seed and shuffle seed from ``seed``);
    ``known_spreads`` as :func:`dlopt.measurement.run_race`'s."""
    machine = SimulatedMachine(noise, seed=seed, resolution_ns=resolution_ns)
    n_cases = len(next(iter(latencies.values())))
    return run_race(
        machine.candidates(latencies),
        weights if weights is not None else [1.0] * n_cases,
        baseline,
        min_speedup,
        evolve(policy, seed=seed),
        clock=machine.clock,
        natives=natives,
        known_spreads=known_spreads,
    )


def run_simulated_fixed(
    latencies: Mapping[str, Sequence[float]],
    *,
    baseline: str,
    min_speedup: float,
    noise: NoiseModel | None = None,
    seed: int = 0,
    weights: Sequence[float] | None = None,
    warmup: int = 5,
    iterations: int = 20,
    repeats: int = 3,
) -> BackToBackResult:
    """The fixed back-to-back protocol on a fresh simulated machine."""
    machine = SimulatedMachine(noise, seed=seed)
    n_cases = len(next(iter(latencies.values())))
    return back_to_back_protocol(
        machine.candidates(latencies),
        weights if weights is not None else [1.0] * n_cases,
        baseline,
        min_speedup,
        warmup=warmup,
        iterations=iterations,
        repeats=repeats,
        clock=machine.clock,
    )
