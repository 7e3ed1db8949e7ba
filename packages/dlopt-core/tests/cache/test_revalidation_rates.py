"""The revalidation probe's rule on the fake clock: an unchanged plan is reused in at least
95% of warm restarts, a plan that fell 10% below the bar is caught in at least 95%."""

from __future__ import annotations

import attrs
import pytest

from dlopt.cache.revalidate import PROBE_MAX_ROUNDS, probe_keeps, probe_policy
from dlopt.measurement import MeasurementPolicy
from dlopt.testing.simulation import NoiseModel, run_simulated_race

MIN_SPEEDUP = 1.02
SEEDS = 200
BASELINE_S = 0.005  # a 5 ms model call, as the demo's plans take


def reuse_rate(true_speedup: float, noise: NoiseModel) -> float:
    policy = probe_policy(MeasurementPolicy())
    kept = 0
    for seed in range(SEEDS):
        result = run_simulated_race(
            {"baseline": [BASELINE_S], "cached": [BASELINE_S / true_speedup]},
            baseline="baseline",
            min_speedup=MIN_SPEEDUP,
            policy=attrs.evolve(policy, seed=seed),
            noise=noise,
            seed=seed,
        )
        assert result.rounds <= PROBE_MAX_ROUNDS
        kept += probe_keeps(result.candidate("cached").speedup_vs_baseline, MIN_SPEEDUP)
    return kept / SEEDS


NOISES = {
    "quiet": NoiseModel(),
    "shared_cpu": NoiseModel(turn_jitter=0.02, preempt_probability=0.02, preempt_delay=0.5),
}


@pytest.mark.parametrize("noise", NOISES.values(), ids=NOISES.keys())
@pytest.mark.parametrize("true_speedup", [1.3, 1.05])
def test_an_unchanged_plan_is_reused(true_speedup, noise):
    # A cached pick cleared the bar with confidence when it was raced: its speedup is above it.
    assert reuse_rate(true_speedup, noise) >= 0.95


def test_a_plan_exactly_at_the_bar_is_reused_at_the_confidence_level():
    # The upper bound covers the truth at the race's confidence (95%): the edge case.
    assert reuse_rate(MIN_SPEEDUP, NOISES["quiet"]) >= 0.95


@pytest.mark.parametrize("noise", NOISES.values(), ids=NOISES.keys())
def test_a_plan_that_regressed_below_the_bar_is_caught(noise):
    assert reuse_rate(MIN_SPEEDUP / 1.1, noise) <= 0.05


def test_the_rule_reads_the_upper_bound():
    from dlopt.measurement import RatioInterval

    interval = RatioInterval(point=1.0, low=0.95, high=1.03, confidence=0.95, method="t", rounds=5)
    assert probe_keeps(interval, 1.02)
    assert not probe_keeps(attrs.evolve(interval, high=1.01), 1.02)
    assert not probe_keeps(None, 1.02)


def test_the_probe_is_short():
    policy = probe_policy(MeasurementPolicy())
    assert policy.max_rounds == PROBE_MAX_ROUNDS and policy.max_time_s <= 3.0
    assert policy.futility_confidence is None
