"""The revalidation probe's rule on the fake clock: an unchanged plan is reused in at least
95% of warm restarts, a plan that fell 10% below the bar is caught in at least 95%."""

from __future__ import annotations

import attrs
import pytest

from dlopt.cache.recheck import (
    PROBE_CEILING_S,
    PROBE_MAX_ROUNDS,
    PROBE_MIN_ROUNDS_KNOWN_SPREAD,
    probe_keeps,
    probe_policy,
)
from dlopt.measurement import MeasurementPolicy
from dlopt.measurement.sequential import KnownSpread
from dlopt.testing.simulation import NoiseModel, run_simulated_race

MIN_SPEEDUP = 1.02
SEEDS = 200
BASELINE_S = 0.005  # a 5 ms model call, as the demo's plans take


def probe(true_speedup: float, baseline_s: float, seed: int, noise: NoiseModel | None = None):
    """One simulated revalidation probe: the baseline against the cached pick."""
    return run_simulated_race(
        {"baseline": [baseline_s], "cached": [baseline_s / true_speedup]},
        baseline="baseline",
        min_speedup=MIN_SPEEDUP,
        policy=attrs.evolve(probe_policy(MeasurementPolicy()), seed=seed),
        noise=noise,
        seed=seed,
    )


def reuse_rate(true_speedup: float, noise: NoiseModel, baseline_s: float = BASELINE_S) -> float:
    kept = 0
    for seed in range(SEEDS):
        result = probe(true_speedup, baseline_s, seed, noise)
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
    assert policy.max_rounds == PROBE_MAX_ROUNDS and policy.auto_budget_min_s <= 3.0
    assert policy.futility_confidence is None
    # A fast model's probe stays within its 3 s.
    assert probe(1.3, BASELINE_S, seed=0).total_time_s <= 3.5


@pytest.mark.parametrize("noise", NOISES.values(), ids=NOISES.keys())
def test_a_slow_models_probe_keeps_both_rates(noise):
    """A 150 ms call (mobilenet_v2 on 2 cores): paired rounds of about 2 s still give the
    probe the rounds that make both rates hold."""
    assert reuse_rate(1.3, noise, baseline_s=0.15) >= 0.95
    assert reuse_rate(MIN_SPEEDUP / 1.1, noise, baseline_s=0.15) <= 0.05


@pytest.mark.parametrize("call_s", [0.06, 0.25])
def test_a_slow_models_probe_still_measures_its_minimum_rounds(call_s):
    """Paired rounds of seconds (mobilenet_v2 on 2 cores): the probe takes the time its
    minimum rounds need, so an unchanged plan keeps its interval and is reused."""
    result = probe(1.6, call_s, seed=1)
    assert result.rounds >= probe_policy(MeasurementPolicy()).min_rounds
    interval = result.candidate("cached").speedup_vs_baseline
    assert interval is not None and interval.high is not None
    assert probe_keeps(interval, MIN_SPEEDUP)
    assert result.total_time_s <= PROBE_CEILING_S


def test_a_slow_models_probe_warms_up_and_bursts_briefly():
    """The probe's two plans were warmed and timed by the race that chose them: a short
    warm-up and 4-call bursts make a slow model's probe (a cache hit's largest cost)
    shorter than the race's own warm-up and bursts would, with the same rounds."""
    race_like = attrs.evolve(
        probe_policy(MeasurementPolicy()),
        warmup_max_calls=MeasurementPolicy().warmup_max_calls,
        warmup_max_time_s=MeasurementPolicy().warmup_max_time_s,
        timed_calls_per_burst=MeasurementPolicy().timed_calls_per_burst,
        seed=1,
    )
    plans = {"baseline": [0.15], "cached": [0.15 / 1.6]}
    brief = probe(1.6, 0.15, seed=1)
    full = run_simulated_race(
        plans, baseline="baseline", min_speedup=MIN_SPEEDUP, policy=race_like, seed=1
    )
    assert brief.rounds == full.rounds
    assert brief.total_time_s < 0.85 * full.total_time_s


# -- the probe that starts from the spread its record kept -----------------------------
def recorded_spread(true_speedup: float, noise: NoiseModel, seed: int) -> KnownSpread:
    """The spread a default race (the one that chose the cached pick) measured between the
    baseline and the pick, as the record keeps it."""
    race = run_simulated_race(
        {"baseline": [BASELINE_S], "cached": [BASELINE_S / true_speedup]},
        baseline="baseline",
        min_speedup=MIN_SPEEDUP,
        policy=MeasurementPolicy(),
        noise=noise,
        seed=10_000 + seed,
    )
    cached = race.candidate("cached")
    assert cached.round_spread is not None
    return KnownSpread(cached.round_spread, cached.rounds - 1)


def known_probe(true_speedup: float, noise: NoiseModel, seed: int, recorded: KnownSpread):
    return run_simulated_race(
        {"baseline": [BASELINE_S], "cached": [BASELINE_S / true_speedup]},
        baseline="baseline",
        min_speedup=MIN_SPEEDUP,
        policy=attrs.evolve(probe_policy(MeasurementPolicy(), known_spread=True), seed=seed),
        noise=noise,
        seed=seed,
        known_spreads={"cached": recorded},
    )


def known_reuse_rate(
    true_speedup: float, noise: NoiseModel, recorded_at: float, recorded_in: NoiseModel
) -> float:
    """How often the probe keeps a pick now ``true_speedup`` faster, starting from the
    spread a race kept when it was ``recorded_at`` faster, on a machine as ``recorded_in``."""
    kept = 0
    for seed in range(SEEDS):
        recorded = recorded_spread(recorded_at, recorded_in, seed)
        result = known_probe(true_speedup, noise, seed, recorded)
        assert result.rounds <= PROBE_MAX_ROUNDS
        kept += probe_keeps(result.candidate("cached").speedup_vs_baseline, MIN_SPEEDUP)
    return kept / SEEDS


@pytest.mark.parametrize("noise", NOISES.values(), ids=NOISES.keys())
@pytest.mark.parametrize("true_speedup", [1.3, 1.05])
def test_with_the_recorded_spread_an_unchanged_plan_is_reused(true_speedup, noise):
    assert known_reuse_rate(true_speedup, noise, true_speedup, noise) >= 0.95


@pytest.mark.parametrize(
    ("now", "then"),
    [
        ("quiet", "quiet"),
        ("shared_cpu", "shared_cpu"),
        ("shared_cpu", "quiet"),
        ("quiet", "shared_cpu"),
    ],
)
def test_with_the_recorded_spread_a_plan_that_regressed_is_caught(now, then):
    """Recorded 1.3x faster, now 10% below the bar: caught, also where the machine is
    busier now than when the spread was recorded (the F check falls back to the probe's
    own spread) or quieter."""
    assert known_reuse_rate(MIN_SPEEDUP / 1.1, NOISES[now], 1.3, NOISES[then]) <= 0.05


def test_a_large_recorded_effect_is_confirmed_in_fewer_rounds():
    """A pick recorded 3x faster, unchanged: the record's spread decides it at the second
    look, where a probe without it needs the race's minimum rounds."""
    noise = NOISES["shared_cpu"]
    with_spread = [known_probe(3.0, noise, s, recorded_spread(3.0, noise, s)) for s in range(20)]
    without = [probe(3.0, BASELINE_S, s, noise) for s in range(20)]
    assert all(r.rounds == PROBE_MIN_ROUNDS_KNOWN_SPREAD for r in with_spread)
    assert all(r.rounds >= MeasurementPolicy().min_rounds for r in without)
    assert all(
        probe_keeps(r.candidate("cached").speedup_vs_baseline, MIN_SPEEDUP) for r in with_spread
    )


#: A machine far busier than the shared CPU: a fifth of a call's jitter, one call in ten
#: preempted for a whole call.
BUSY = NoiseModel(turn_jitter=0.2, preempt_probability=0.1, preempt_delay=1.0)


def test_a_spread_recorded_on_a_busy_machine_does_not_hide_a_regression_on_a_quiet_one():
    """The record's race ran beside other work, the probe on a quiet machine: its rounds
    disagree with the recorded spread, so the probe decides on its own (pooled, the wide
    recorded spread kept a regressed plan in about 78% of restarts)."""
    assert known_reuse_rate(MIN_SPEEDUP / 1.1, NOISES["quiet"], 1.3, BUSY) <= 0.05


def test_on_a_busier_machine_the_recorded_spread_keeps_no_more_regressions_than_no_record():
    """Now busier than when recorded: the recorded spread is too narrow for these rounds;
    the probe keeps a regressed plan no more often than a probe without a record does."""
    regressed = MIN_SPEEDUP / 1.1
    assert (
        known_reuse_rate(regressed, BUSY, 1.3, NOISES["quiet"])
        <= reuse_rate(regressed, BUSY) + 0.05
    )
