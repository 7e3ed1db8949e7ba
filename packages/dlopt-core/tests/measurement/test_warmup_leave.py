"""The warm-up leave rule and the interval an eliminated plan is reported with (fake clock)."""

from __future__ import annotations

import pytest
from attrs import evolve

from dlopt.measurement import MeasurementPolicy
from dlopt.testing.simulation import NoiseModel, run_simulated_race

#: A busy machine: contention spikes, drift, turn-to-turn noise and switch penalties.
ROUGH = NoiseModel(
    jitter=0.05,
    spike_probability=0.05,
    spike_factor=3.0,
    preempt_probability=0.05,
    preempt_delay=2.0,
    turn_jitter=0.1,
)


def test_a_hopeless_plan_leaves_at_warmup_and_never_runs_a_round(fast_policy) -> None:
    # int4-on-CPU-like: 100x slower than the baseline.
    result = run_simulated_race(
        {"eager": [5e-3], "fast": [2.5e-3], "crawl": [0.5]},
        baseline="eager",
        min_speedup=1.05,
        policy=fast_policy,
        seed=3,
    )
    crawl = result.candidate("crawl")
    assert crawl.verdict == "dropped" and crawl.dropped_at_round == 0
    assert crawl.eliminated_by == "eager"
    assert "left at warm-up" in crawl.note and "20x" in crawl.note
    assert crawl.rounds == 0 and crawl.timed_calls == 0
    assert result.candidate("fast").verdict == "faster"


def test_the_rule_can_be_turned_off(fast_policy) -> None:
    policy = evolve(fast_policy, warmup_leave_factor=None, max_rounds=5)
    result = run_simulated_race(
        {"eager": [5e-3], "crawl": [0.5]},
        baseline="eager",
        min_speedup=1.05,
        policy=policy,
        seed=3,
    )
    assert result.candidate("crawl").dropped_at_round != 0
    assert result.candidate("crawl").rounds >= 3


@pytest.mark.parametrize("slowdown", [1.0, 2.0, 5.0, 10.0])
def test_a_plan_within_the_factor_is_never_dropped_on_a_rough_machine(
    fast_policy: MeasurementPolicy, slowdown: float
) -> None:
    # Plans up to 10x slower than the baseline (and plans faster than it) stay for the
    # rounds in every one of 40 races on a machine with spikes, preemption and per-turn
    # noise (a turn's level moves every call of it: the factor's 2x margin is for that).
    for seed in range(40):
        result = run_simulated_race(
            {
                "eager": [4e-3, 1e-3],
                "fast": [2e-3, 0.6e-3],
                "slow": [4e-3 * slowdown, 1e-3 * slowdown],
            },
            baseline="eager",
            min_speedup=1.05,
            policy=evolve(fast_policy, max_rounds=3),
            noise=ROUGH,
            seed=seed,
            weights=[3, 1],
        )
        for name in ("fast", "slow"):
            assert result.candidate(name).dropped_at_round != 0, (seed, name)


def test_min_speedup_below_one_widens_the_rule(fast_policy) -> None:
    # A plan 30x slower still cannot matter at min_speedup 1, but can at min_speedup 0.01.
    latencies = {"eager": [1e-3], "slow": [30e-3]}
    strict = run_simulated_race(
        latencies, baseline="eager", min_speedup=1.0, policy=fast_policy, seed=1
    )
    lenient = run_simulated_race(
        latencies,
        baseline="eager",
        min_speedup=0.01,
        policy=evolve(fast_policy, max_rounds=4),
        seed=1,
    )
    assert strict.candidate("slow").dropped_at_round == 0
    assert lenient.candidate("slow").dropped_at_round != 0


def test_native_plans_never_leave_at_warmup(fast_policy) -> None:
    result = run_simulated_race(
        {"eager": [1e-3], "native_slow": [50e-3], "fast": [0.5e-3]},
        baseline="eager",
        min_speedup=1.05,
        policy=evolve(fast_policy, max_rounds=5),
        seed=2,
        natives=["native_slow"],
    )
    assert result.candidate("native_slow").dropped_at_round != 0


def test_an_eliminated_plan_reports_the_interval_that_eliminated_it(fast_policy) -> None:
    # "fast" leads; "good" passes its gate but is 20% slower than "fast": it is
    # eliminated against the leader, and its evidence holds that comparison.
    result = run_simulated_race(
        {"eager": [2e-3], "fast": [1e-3], "good": [1.2e-3], "meh": [1.9e-3]},
        baseline="eager",
        min_speedup=1.05,
        policy=fast_policy,
        seed=5,
    )
    dropped = [c for c in result.candidates if c.dropped_at_round]
    assert dropped, "expected an elimination"
    for c in dropped:
        assert c.eliminated_by == "fast"
        iv = c.elimination_interval
        assert iv is not None and iv.rounds == c.dropped_at_round
        # The decision: even the upper end is below 1 / indifference zone against the leader.
        assert iv.high < 1 / fast_policy.indifference_zone
        assert iv.low < iv.point < iv.high
        assert "leader" in iv.method
    assert result.candidate("fast").eliminated_by is None


@pytest.mark.parametrize("cap_s", [0.05, 2.0])
def test_a_slow_first_warmup_call_alone_never_sends_a_plan_out(fast_policy, cap_s) -> None:
    # A compiled plan that recompiles on its first raced call (the race's calling context
    # differs from validation's): 100x slow once, then faster than the baseline. Only its
    # first warm-up call fits the warm-up cap, or a second one follows: it stays either way.
    from dlopt.measurement import FakeClock, run_race

    clock = FakeClock()
    calls = {"n": 0}

    def recompiles_once() -> None:
        calls["n"] += 1
        clock.advance(0.5 if calls["n"] == 1 else 0.5e-3)

    result = run_race(
        {"eager": [lambda: clock.advance(1e-3)], "compiled": [recompiles_once]},
        [1.0],
        "eager",
        1.05,
        # Warm-up cap per plan and case: share x budget / (2 plans x 1 case) = cap_s.
        evolve(fast_policy, max_time_s=20.0, warmup_budget_share=cap_s / 10, max_rounds=6),
        clock=clock,
    )
    compiled = result.candidate("compiled")
    assert compiled.dropped_at_round != 0
    assert compiled.rounds >= 3 and compiled.verdict == "faster"
