from __future__ import annotations

import pytest
from attrs import evolve
from scipy import stats

from dlopt.errors import ConfigurationError
from dlopt.measurement import (
    FakeClock,
    MeasurementPolicy,
    MonotonicClock,
    time_call,
)
from dlopt.measurement.stats import bootstrap_mean_interval, t_interval
from dlopt.platform.serialization import dumps, from_jsonable, parse_strict_json


def test_policy_defaults_round_trip_json() -> None:
    policy = MeasurementPolicy()
    assert policy.confidence == 0.95
    assert policy.settle_time_s == pytest.approx(0.03)
    assert policy.max_time_s is None  # scaled to the model's call cost
    assert policy.timed_calls_per_burst >= 4 and policy.burst_statistic == "min"
    assert from_jsonable(parse_strict_json(dumps(policy)), MeasurementPolicy) == policy


@pytest.mark.parametrize(
    "changes",
    [
        {"confidence": 1.0},
        {"confidence": 0.2},
        {"min_rounds": 1},
        {"min_rounds": 10, "max_rounds": 5},
        {"settle_time_s": -1.0},
        {"timed_calls_per_burst": 0},
        {"timed_calls_per_burst": 3},
        {"indifference_zone": 1.0},
        {"auto_budget_min_s": 60.0, "auto_budget_max_s": 30.0},
        {"burst_statistic": "max"},
        {"warmup_budget_share": 0.0},
        {"max_time_s": float("nan")},
        {"settle_tolerance": -0.1},
    ],
)
def test_policy_rejects_bad_values_with_a_message(changes: dict) -> None:
    with pytest.raises(ConfigurationError, match="MeasurementPolicy"):
        MeasurementPolicy(**changes)


def test_fake_clock_quantises_to_its_resolution() -> None:
    clock = FakeClock(resolution_ns=1000)
    clock.advance(2.4e-6)
    assert clock.now_ns() == 2000
    clock.advance(0.7e-6)
    assert clock.now_ns() == 3000
    with pytest.raises(ValueError):
        clock.advance(-1.0)


def test_monotonic_clock_never_goes_back() -> None:
    clock = MonotonicClock()
    readings = [clock.now_ns() for _ in range(100)]
    assert readings == sorted(readings)
    assert clock.resolution_ns >= 1


def test_time_call_counts_asynchronous_work_when_synchronized() -> None:
    clock = FakeClock()
    pending = []

    def launch() -> None:  # returns at once, like a CUDA kernel launch
        clock.advance(1e-6)
        pending.append(5e-3)

    def synchronize() -> None:
        while pending:
            clock.advance(pending.pop())

    assert time_call(launch, clock)[0] == pytest.approx(1e-6)
    pending.clear()
    assert time_call(launch, clock, synchronize)[0] == pytest.approx(5e-3 + 1e-6)


def test_t_interval_matches_scipy() -> None:
    values = [0.1, 0.12, 0.08, 0.11, 0.095]
    mean, low, high = t_interval(values, 0.01)
    ref = stats.t.interval(0.99, len(values) - 1, loc=mean, scale=stats.sem(values))
    assert (low, high) == pytest.approx(ref)
    assert t_interval([1.0], 0.05) is None


def test_bootstrap_interval_brackets_the_mean() -> None:
    values = [0.1, 0.12, 0.08, 0.11, 0.095, 0.105, 0.09]
    mean, low, high, method = bootstrap_mean_interval(values, 0.95, 999, seed=3)
    assert low < mean < high
    assert method in ("BCa", "percentile")
    assert bootstrap_mean_interval([1.0, 1.0, 1.0], 0.95, 999, seed=3) is None


def test_evolve_keeps_validation() -> None:
    with pytest.raises(ConfigurationError):
        evolve(MeasurementPolicy(), max_rounds=1)
