"""Rounds a measurement kernel needs to decide, on noise like a shared 2-core machine's.

Runs against whichever dlopt is importable, so two revisions of the kernel can be put
side by side on the same simulated machine and seeds:

    python benchmarks/kernel_rounds.py
    git worktree add /tmp/dlopt-0.2 7931ac7
    PYTHONPATH=/tmp/dlopt-0.2/packages/dlopt-core/src python benchmarks/kernel_rounds.py

Two noises on top of the simulator's defaults: contention (30% of calls pay an extra
Exp(0.8) of their latency: bimodal, as when another process takes a core from an OpenMP
team) and turn-to-turn variation (one lognormal factor, sd 0.106, per turn of a plan: a
per-round paired spread of 0.15 that no estimator filters). For each: the share of races
that find a true 10% gain within 400 rounds (futility off, so every race runs until its
boundary is crossed) and the rounds it took; then the same with the default policy (its
own budget and stopping rules); then the demo-like set (16 challengers) with the default
policy: the share of races whose pick is more than 2% slower than the best plan.
"""

from __future__ import annotations

import argparse
import math
import statistics

from attrs import evolve

from dlopt.measurement import MeasurementPolicy, run_race

try:  # since Measurement 2 the simulator lives in dlopt.testing
    from dlopt.testing.simulation import NoiseModel, SimulatedMachine
except ImportError:  # the kernel before it
    from dlopt.measurement.simulation import (  # type: ignore[import-not-found,no-redef]
        NoiseModel,
        SimulatedMachine,
    )

L = 1e-3
DEMO = (1.91, 1.88, 1.75, 1.60, 1.23, 1.10, 1.05, 1.02, 1.0, 0.98, 0.9, 0.8, 0.7, 0.6, 0.5, 1.5)


class NoisyMachine(SimulatedMachine):
    """The default simulated machine plus turn-to-turn variation and contention."""

    def __init__(self, turn: float, preempt: float, delay: float, seed: int) -> None:
        super().__init__(NoiseModel(), seed=seed)
        self.turn, self.preempt, self.delay = turn, preempt, delay
        self._plan: str | None = None
        self._turn_factor = 1.0

    def factor(self, plan: str) -> float:
        f = super().factor(plan)
        if plan != self._plan:
            self._plan = plan
            self._turn_factor = math.exp(self._rng.gauss(0.0, self.turn)) if self.turn else 1.0
        f *= self._turn_factor
        if self.preempt and self._rng.random() < self.preempt:
            f *= 1.0 + self._rng.expovariate(1.0 / self.delay)
        return f


def pick(result) -> str:  # type: ignore[no-untyped-def]
    """The leader when the kernel names one that passed its gate, else the best point."""
    leader = getattr(result, "leader", None)
    if leader and result.candidate(leader).verdict == "faster":
        return str(leader)
    winners = [c for c in result.candidates if c.verdict == "faster"]
    return max(winners, key=lambda c: c.speedup_vs_baseline.point).name if winners else "base"


def race(latencies, noise, policy, seed, weights=None):  # type: ignore[no-untyped-def]
    machine = NoisyMachine(*noise, seed=seed)
    n_cases = len(latencies["base"])
    return run_race(
        machine.candidates(latencies),
        weights or [1.0] * n_cases,
        "base",
        1.02,
        evolve(policy, seed=seed),
        clock=machine.clock,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--races", type=int, default=60)
    args = parser.parse_args()
    default = MeasurementPolicy(bootstrap_resamples=0, record_page_faults=False)
    long = evolve(default, max_rounds=400, futility_confidence=None, max_time_s=1e9)
    gain = {"base": [L], "ch": [L / 1.1]}
    demo = {"base": [2e-3, 8e-3]} | {f"c{i}": [2e-3 / s, 8e-3 / s] for i, s in enumerate(DEMO)}
    truth = {f"c{i}": s for i, s in enumerate(DEMO)} | {"base": 1.0}
    for label, noise in (("contention", (0.0, 0.3, 0.8)), ("turn 0.106", (0.106, 0.0, 0.0))):
        found = []
        for seed in range(args.races):
            m = race(gain, noise, long, seed).candidate("ch")
            if m.verdict == "faster":
                found.append(m.resolved_at_round)
        found.sort()
        p95 = found[max(0, math.ceil(0.95 * len(found)) - 1)] if found else None
        print(
            f"[{label}] 10% gain, until found: {len(found) / args.races:.0%} within 400 rounds, "
            f"rounds p50 {statistics.median(found) if found else None}, p95 {p95}"
        )
        results = [race(gain, noise, default, seed) for seed in range(args.races)]
        print(
            f"[{label}] 10% gain, default policy: found in "
            f"{sum(pick(r) == 'ch' for r in results) / args.races:.0%}, rounds p50 "
            f"{statistics.median(r.rounds for r in results)}"
        )
        demo_races = max(args.races // 2, 10)
        results = [race(demo, noise, default, s, [0.7, 0.3]) for s in range(demo_races)]
        regret = sum(truth[pick(r)] < max(DEMO) / 1.02 for r in results) / demo_races
        print(
            f"[{label}] demo-like set, default policy: P(regret > 2%) {regret:.0%}, rounds p50 "
            f"{statistics.median(r.rounds for r in results)}"
        )


if __name__ == "__main__":
    main()
