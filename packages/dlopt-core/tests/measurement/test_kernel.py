"""Behaviour of ``run_race`` on a fake clock: exact, fast, no wall-clock asserts."""

from __future__ import annotations

import json
import math

import pytest
from attrs import evolve

from dlopt.errors import ConfigurationError
from dlopt.measurement import FakeClock, MeasurementPolicy, RaceResult, run_race
from dlopt.platform.serialization import converter, dumps, from_jsonable, parse_strict_json
from dlopt.testing.simulation import NoiseModel, SimulatedMachine, run_simulated_race

QUIET = NoiseModel(jitter=0.0, spike_probability=0.0, drift_amplitude=0.0, switch_penalty=0.0)


def fixed_latency(clock: FakeClock, seconds: float, log: list[str] | None = None, name: str = ""):
    def call() -> None:
        if log is not None:
            log.append(name)
        clock.advance(seconds)

    return call


def test_result_shape_gate_and_json_round_trip() -> None:
    policy = MeasurementPolicy(seed=7, bootstrap_resamples=500)
    result = run_simulated_race(
        {"eager": [2e-3, 1e-3], "fast": [1e-3, 0.5e-3]},
        baseline="eager",
        min_speedup=1.05,
        policy=policy,
        seed=7,
        weights=[3, 1],
    )
    assert result.seed == 7
    assert result.weights == pytest.approx((0.75, 0.25))
    assert result.stop_reason == "resolved"
    fast = result.candidate("fast")
    assert fast.verdict == "faster"
    assert fast.speedup_vs_baseline.low >= 1.05
    assert fast.speedup_vs_baseline.point == pytest.approx(2.0, rel=0.1)
    assert fast.speedup_fixed_sample is not None and "bootstrap" in fast.speedup_fixed_sample.method
    assert result.candidate("eager").verdict == "baseline"
    stats = fast.cases[0]
    assert stats.case == "case0" and stats.samples == stats.rounds * policy.timed_calls_per_burst
    assert stats.min_ms <= stats.median_ms <= stats.p90_ms <= stats.p95_ms <= stats.p99_ms
    assert stats.mean_low_ms < stats.mean_ms < stats.mean_high_ms
    assert stats.warmup_calls >= 2 * policy.warmup_window
    assert fast.weighted_mean_ms == pytest.approx(0.75 * 1.0 + 0.25 * 0.5, rel=0.1)
    assert result.timed_calls == sum(c.timed_calls for c in result.candidates)
    text = dumps(result)
    assert "NaN" not in text and "Infinity" not in text
    assert from_jsonable(parse_strict_json(text), RaceResult) == result
    json.loads(text)  # strict JSON
    assert converter.structure(converter.unstructure(result), RaceResult) == result


def test_same_seed_same_race_and_order_is_shuffled_per_round(fast_policy) -> None:
    clock = FakeClock()
    log: list[str] = []
    cands = {
        name: [
            fixed_latency(clock, 1e-3, log, f"{name}/0"),
            fixed_latency(clock, 1e-3, log, f"{name}/1"),
        ]
        for name in ("a", "b", "c")
    }
    policy = evolve(
        fast_policy, seed=11, min_rounds=6, max_rounds=6, settle_time_s=0.0, settle_min_calls=0
    )
    policy = evolve(policy, settle_tolerance=None)
    result = run_race(cands, [1, 1], "a", 1.5, policy, clock=clock)
    assert result.rounds == 6
    # Warm-up: 4 calls per plan and case (flat latency converges after two windows of 2);
    # then every round runs every plan on every case as one burst of timed calls.
    assert all(c.warmup_calls == 8 for c in result.candidates)
    rounds_log = log[24:]
    t = policy.timed_calls_per_burst
    bursts = [rounds_log[i : i + t] for i in range(0, len(rounds_log), t)]
    assert all(len(set(b)) == 1 for b in bursts)
    per_round = [[b[0] for b in bursts[6 * r : 6 * (r + 1)]] for r in range(6)]
    assert all(sorted(r) == sorted(f"{n}/{i}" for n in "abc" for i in (0, 1)) for r in per_round)
    assert len({tuple(r) for r in per_round}) > 1  # a fresh order each round

    clock2, log2 = FakeClock(), []
    cands2 = {
        name: [
            fixed_latency(clock2, 1e-3, log2, f"{name}/0"),
            fixed_latency(clock2, 1e-3, log2, f"{name}/1"),
        ]
        for name in ("a", "b", "c")
    }
    assert run_race(cands2, [1, 1], "a", 1.5, policy, clock=clock2) == result
    assert log2 == log


def test_failing_challenger_is_recorded_and_the_race_goes_on(fast_policy) -> None:
    machine = SimulatedMachine(QUIET, seed=1)
    calls = {"n": 0}

    def flaky() -> None:
        calls["n"] += 1
        if calls["n"] > 12:  # fails in round 2
            raise RuntimeError("engine lost")
        machine.clock.advance(1e-3)

    cands = {
        "base": [machine.plan("base", 1e-3)],
        "flaky": [flaky],
        "good": [machine.plan("good", 0.5e-3)],
    }
    result = run_race(cands, [1], "base", 1.02, evolve(fast_policy, seed=1), clock=machine.clock)
    flaky_m = result.candidate("flaky")
    assert flaky_m.verdict == "failed"
    assert "RuntimeError: engine lost" in flaky_m.error
    assert result.candidate("good").verdict == "faster"


def test_failing_baseline_raises(fast_policy) -> None:
    machine = SimulatedMachine(QUIET, seed=1)

    def broken() -> None:
        raise ValueError("baseline broke")

    with pytest.raises(ValueError, match="baseline broke"):
        run_race(
            {"base": [broken], "x": [machine.plan("x", 1e-3)]},
            [1],
            "base",
            1.02,
            fast_policy,
            clock=machine.clock,
        )


def test_bad_arguments_say_what_to_fix(fast_policy) -> None:
    clock = FakeClock()
    call = fixed_latency(clock, 1e-3)
    with pytest.raises(ConfigurationError, match="baseline"):
        run_race({"a": [call]}, [1], "b", 1.02, fast_policy, clock=clock)
    with pytest.raises(ConfigurationError, match="one zero-argument callable per workload case"):
        run_race({"a": [call], "b": [call, call]}, [1], "a", 1.02, fast_policy, clock=clock)
    with pytest.raises(ConfigurationError, match="min_speedup"):
        run_race({"a": [call], "b": [call]}, [1], "a", float("nan"), fast_policy, clock=clock)
    with pytest.raises(ConfigurationError, match="weight"):
        run_race({"a": [call], "b": [call]}, [0], "a", 1.02, fast_policy, clock=clock)


def test_baseline_alone_needs_no_race(fast_policy) -> None:
    clock = FakeClock()
    result = run_race({"a": [fixed_latency(clock, 1e-3)]}, [1], "a", 1.02, fast_policy, clock=clock)
    assert result.stop_reason == "no_challengers"
    assert result.candidates[0].verdict == "baseline"


def test_measure_alone_times_a_lone_baseline_for_the_minimum_rounds(fast_policy) -> None:
    # The throughput objective reads each case's latency, from a plan racing alone too.
    clock = FakeClock()
    cases = [fixed_latency(clock, 1e-3), fixed_latency(clock, 3e-3)]
    result = run_race({"a": cases}, [1, 1], "a", 1.02, fast_policy, clock=clock, measure_alone=True)
    assert result.rounds == fast_policy.min_rounds
    assert [c.mean_ms for c in result.candidates[0].cases] == pytest.approx([1.0, 3.0])
    assert all(
        len([s for s in per_round if s is not None]) == fast_policy.min_rounds
        for per_round in result.candidates[0].case_round_scores
    )


def test_traffic_weights_decide_which_plan_is_cheaper(fast_policy) -> None:
    # "b" is 2x faster on the rare case and 20% slower on the common one: slower overall.
    lat = {"a": [1e-3, 4e-3], "b": [1.2e-3, 2e-3]}

    def race(weights: list[float]):
        return run_simulated_race(
            lat,
            baseline="a",
            min_speedup=1.0,
            policy=fast_policy,
            noise=QUIET,
            seed=2,
            weights=weights,
        )

    heavy_common = race([0.95, 0.05])
    assert heavy_common.candidate("b").verdict == "not_faster"
    heavy_rare = race([0.2, 0.8])
    assert heavy_rare.candidate("b").verdict == "faster"
    expected = (0.2 * 1 + 0.8 * 4) / (0.2 * 1.2 + 0.8 * 2)
    assert heavy_rare.candidate("b").speedup_vs_baseline.point == pytest.approx(expected, rel=1e-6)


def test_clearly_worse_than_the_leader_is_dropped(fast_policy) -> None:
    lat = {"base": [1e-3], "best": [0.5e-3], "meh": [0.97e-3]}
    result = run_simulated_race(
        lat, baseline="base", min_speedup=1.02, policy=fast_policy, noise=NoiseModel(), seed=5
    )
    assert result.candidate("best").verdict == "faster"
    meh = result.candidate("meh")
    assert meh.verdict in ("dropped", "not_faster")
    if meh.verdict == "dropped":
        assert meh.dropped_at_round is not None and "best" in meh.note


def test_sub_resolution_calls_are_timed_in_blocks(fast_policy) -> None:
    # A 1 us timer cannot time a 2 us call: one reading is 1 or 3 us (50% error).
    machine = SimulatedMachine(QUIET, seed=0, resolution_ns=1000)
    cands = machine.candidates({"a": [2e-6], "b": [1e-6]})
    policy = evolve(fast_policy, max_rounds=6)
    result = run_race(cands, [1], "a", 1.02, policy, clock=machine.clock)
    for name, true_ms in (("a", 2e-3), ("b", 1e-3)):
        stats = result.candidate(name).cases[0]
        assert stats.block_size > 1
        assert stats.block_size * true_ms * 1e-3 >= 1000 * 1e-6  # >= 1000 ticks per block
        assert stats.timed_calls == stats.samples * stats.block_size
        assert stats.mean_ms == pytest.approx(true_ms, rel=0.01)
    assert result.candidate("b").speedup_vs_baseline.point == pytest.approx(2.0, rel=0.01)


def test_calls_the_timer_resolves_are_not_blocked(fast_policy) -> None:
    result = run_simulated_race(
        {"a": [1e-3], "b": [1e-3]}, baseline="a", min_speedup=1.02, policy=fast_policy, seed=0
    )
    assert all(c.cases[0].block_size == 1 for c in result.candidates)


def test_round_budget_exhausted_is_unresolved_never_a_switch(fast_policy) -> None:
    # True gain sits on the threshold: no amount of rounds resolves it within 6.
    policy = evolve(fast_policy, max_rounds=6)
    for seed in range(40):
        result = run_simulated_race(
            {"a": [1e-3], "b": [1e-3 / 1.02]},
            baseline="a",
            min_speedup=1.02,
            policy=policy,
            seed=seed,
        )
        b = result.candidate("b")
        assert b.verdict != "faster" or b.speedup_vs_baseline.low >= 1.02
        if result.stop_reason == "max_rounds":
            assert b.verdict == "unresolved"
            assert b.speedup_vs_baseline.low < 1.02 <= b.speedup_vs_baseline.high
            assert result.rounds == 6


def test_time_budget_exhausted_is_unresolved(fast_policy) -> None:
    policy = evolve(fast_policy, max_time_s=0.02)
    result = run_simulated_race(
        {"a": [1e-3], "b": [0.5e-3]}, baseline="a", min_speedup=1.02, policy=policy, seed=0
    )
    assert result.stop_reason == "time_budget"
    assert result.rounds < policy.min_rounds
    assert result.candidate("b").verdict == "unresolved"
    assert result.faster == ()


def test_on_round_snapshots_and_cancellation(fast_policy) -> None:
    seen: list[tuple[int, bool]] = []
    machine = SimulatedMachine(NoiseModel(), seed=3)
    cands = machine.candidates({"a": [1e-3], "b": [1e-3]})
    result = run_race(
        cands,
        [1],
        "a",
        1.0,
        # Futility off: A vs A could otherwise stop for futility before the cancellation.
        evolve(fast_policy, seed=3, futility_confidence=None),
        clock=machine.clock,
        on_round=lambda r, snap: seen.append((r, snap.final)),
        should_continue=lambda: len(seen) < 5,
    )
    assert seen == [(r, False) for r in range(1, 6)]
    assert result.stop_reason == "cancelled" and result.final
    assert result.candidate("b").verdict == "unresolved"


def test_synchronize_brackets_timed_regions(fast_policy) -> None:
    clock = FakeClock()
    pending: list[float] = []

    def launch(seconds: float):
        def call() -> None:
            clock.advance(1e-6)
            pending.append(seconds)

        return call

    def synchronize() -> None:
        while pending:
            clock.advance(pending.pop())

    cands = {"a": [launch(2e-3)], "b": [launch(1e-3)]}
    result = run_race(cands, [1], "a", 1.02, fast_policy, clock=clock, synchronize=synchronize)
    assert result.candidate("a").cases[0].mean_ms == pytest.approx(2.001, rel=1e-3)
    assert result.candidate("b").speedup_vs_baseline.point == pytest.approx(2.001 / 1.001, rel=1e-3)


def test_page_faults_are_recorded_on_posix() -> None:
    pytest.importorskip("resource")
    policy = MeasurementPolicy(
        min_rounds=3, max_rounds=3, seed=0, settle_time_s=0.0, bootstrap_resamples=0
    )

    def churn() -> None:
        bytearray(256 * 1024)

    result = run_race({"a": [churn], "b": [lambda: None]}, [1], "a", 1.02, policy)
    faults = result.candidate("a").cases[0].page_faults_per_call
    assert faults is not None and faults >= 0 and math.isfinite(faults)


def _warmed_against_1ms(call, policy, clock):
    """Race ``call`` (plan ``a``, the baseline) against a flat 1 ms plan; ``a``'s one case."""
    result = run_race(
        {"a": [call], "b": [fixed_latency(clock, 1e-3)]}, [1], "a", 1.02, policy, clock=clock
    )
    return result.candidate("a").cases[0]


def test_warmup_waits_for_the_trend_to_stop(fast_policy) -> None:
    clock = FakeClock()
    state = {"n": 0}

    def jit_like() -> None:  # each call faster than the last until it settles at 1 ms
        state["n"] += 1
        clock.advance(1e-3 * (1.0 + 4.0 * 0.6 ** state["n"]))

    a = _warmed_against_1ms(jit_like, fast_policy, clock)
    assert a.warmup_converged and a.warmup_calls >= 8
    assert a.p99_ms < 1.03  # no warm-up call leaked into the timed samples


def test_warmup_is_capped(fast_policy) -> None:
    clock = FakeClock()
    state = {"t": 10e-3}

    def always_improving() -> None:
        state["t"] *= 0.9
        clock.advance(state["t"] + 1e-4)

    policy = evolve(fast_policy, warmup_max_calls=12, max_rounds=4)
    a = _warmed_against_1ms(always_improving, policy, clock)
    assert a.warmup_calls == 12 and not a.warmup_converged


def test_every_burst_settles_and_a_round_runs_case_by_case(fast_policy) -> None:
    # Flat latency: one untimed call settles every burst, including one that follows the
    # same plan (no round starts unsettled); within a round, every plan runs one case
    # before any plan runs the next, so the bursts a comparison pairs run close together.
    clock = FakeClock()
    log: list[str] = []
    cands = {
        name: [fixed_latency(clock, 1e-3, log, f"{name}/{i}") for i in range(2)]
        for name in ("a", "b", "c")
    }
    policy = evolve(fast_policy, seed=5, min_rounds=5, max_rounds=5, futility_confidence=None)
    result = run_race(cands, [1, 1], "a", 1.5, policy, clock=clock)
    assert result.rounds == 5
    warm = sum(c.warmup_calls for c in result.candidates)
    burst = policy.timed_calls_per_burst + 1  # one settle call + the timed calls
    assert all(c.untimed_calls == 5 * 2 for c in result.candidates)  # one per burst
    turns = [log[j] for j in range(warm, len(log), burst)]
    assert all(log[j : j + burst] == [log[j]] * burst for j in range(warm, len(log), burst))
    for r in range(5):
        cases = [turn.split("/")[1] for turn in turns[6 * r : 6 * (r + 1)]]
        assert cases in (["0"] * 3 + ["1"] * 3, ["1"] * 3 + ["0"] * 3)


def test_futility_uses_the_remaining_budget_on_a_noisy_machine(fast_policy) -> None:
    # A vs A with 15% per-call jitter: the interval could never clear 2% within budget.
    noisy = NoiseModel(jitter=0.15)
    with_futility, without = [], []
    for seed in range(20):
        kwargs = dict(baseline="base", min_speedup=1.02, noise=noisy, seed=seed)
        with_futility.append(
            run_simulated_race({"base": [1e-3], "ch": [1e-3]}, policy=fast_policy, **kwargs)
        )
        without.append(
            run_simulated_race(
                {"base": [1e-3], "ch": [1e-3]},
                policy=evolve(fast_policy, futility_confidence=None),
                **kwargs,
            )
        )
    # (False switches are bounded by alpha, not zero: the A vs A tests count them.)
    assert sum(r.rounds for r in with_futility) < sum(r.rounds for r in without) / 2
    stopped = [r for r in with_futility if r.stop_reason == "futility"]
    assert len(stopped) > 10
    assert all("within the budget" in r.candidate("ch").note for r in stopped)


def test_a_real_gain_is_still_found_on_a_noisy_machine(fast_policy) -> None:
    # The budget-aware futility stop must not give up on a clear gain (1.5x, 15% jitter).
    noisy = NoiseModel(jitter=0.15)
    verdicts = [
        run_simulated_race(
            {"base": [1e-3], "ch": [1e-3 / 1.5]},
            baseline="base",
            min_speedup=1.02,
            policy=fast_policy,
            noise=noisy,
            seed=seed,
        )
        .candidate("ch")
        .verdict
        for seed in range(40)
    ]
    assert verdicts.count("faster") >= 38


def test_unsettled_bursts_are_counted_when_a_plan_leaves_work_behind(fast_policy) -> None:
    # After its warm-up, "spinner" keeps the machine busy for 50 ms after each call (like a
    # runtime's spinning worker threads): whatever runs next in that window is 2x slower.
    # (Interference already present during the victim's warm-up would set its reference
    # too: no plan-agnostic rule can see that; hence ONNX Runtime's spinning is off.)
    clock = FakeClock()
    busy_until = [0.0]
    spinner_calls = [0]

    def spinner() -> None:
        clock.advance(1e-3)
        spinner_calls[0] += 1
        if spinner_calls[0] > 4:
            busy_until[0] = clock.elapsed_s + 0.05

    def victim() -> None:
        clock.advance(2e-3 if clock.elapsed_s < busy_until[0] else 1e-3)

    policy = evolve(fast_policy, seed=2, min_rounds=6, max_rounds=6, futility_confidence=None)
    result = run_race(
        {"victim": [victim], "spinner": [spinner]}, [1], "victim", 1.02, policy, clock=clock
    )
    assert result.candidate("victim").warmup_calls == 4
    v = result.candidate("victim")
    # The first bursts after the spinning starts hit the settle cap and are counted; the
    # settle target (median of recent samples) then follows the slower latency, as it must
    # for a machine that really slowed down: the race cannot tell the two apart.
    assert v.unsettled_bursts >= 1
    assert result.candidate("spinner").unsettled_bursts == 0
    assert v.cases[0].untimed_calls > 3 * result.candidate("spinner").cases[0].untimed_calls


def test_the_leader_is_ranked_on_all_rounds_and_clearly_slower_plans_leave(fast_policy) -> None:
    # "fast" leads; "good" passes the gate but is 20% slower than fast: eliminated, it keeps
    # its verdict; "twin" is within 1% of fast (inside the 2% zone): the race stops once no
    # survivor can be more than the zone faster than the leader. The baseline leaves the
    # rounds once no gate is open, so the endgame times two plans a round.
    quiet = NoiseModel(jitter=0.01, spike_probability=0.0, drift_amplitude=0.0, switch_penalty=0.0)
    result = run_simulated_race(
        {"base": [1e-3], "fast": [0.5e-3], "twin": [0.505e-3], "good": [0.6e-3]},
        baseline="base",
        min_speedup=1.02,
        policy=fast_policy,
        noise=quiet,
        seed=3,
    )
    assert result.stop_reason == "resolved"
    assert result.leader == "fast"
    assert result.regret_bound is not None and result.regret_bound <= 1.02
    good = result.candidate("good")
    assert good.verdict == "faster" and good.dropped_at_round is not None
    assert "eliminated" in good.note
    ran = [score is not None for score in good.round_scores]
    assert ran == [r < good.dropped_at_round for r in range(result.rounds)]
    assert result.candidate("twin").verdict == "faster"
    # Paired over every round both ran: fast vs twin is about 1%, within the zone.
    head = result.paired_speedup("fast", "twin")
    assert head.point == pytest.approx(1.01, abs=0.005)
    assert head.rounds == result.rounds


def test_a_winner_that_resolves_early_is_ranked_on_every_later_round(fast_policy) -> None:
    # Against a 1.25x bar: "fast" (1.3x, flat) clears its gate at the first look; "best"
    # (1.35x) alternates 20% slower and 25% faster burst by burst, so its gate stays open
    # and the race goes on. fast stays in the rounds, and its point is the mean over every
    # round it ran with the baseline, not the look where it resolved: early resolvers are
    # biased high when their first rounds were lucky. (One settle call and 6 timed calls
    # per burst, 4 warm-up calls: a burst is calls 4 + 7k .. 10 + 7k.)
    clock = FakeClock()
    calls = {"n": 0}

    def best() -> None:
        burst = max(0, calls["n"] - 4) // 7
        calls["n"] += 1
        clock.advance(1e-3 / 1.35 * (0.8 if burst % 2 else 1.25))

    cands = {
        "base": [fixed_latency(clock, 1e-3)],
        "fast": [fixed_latency(clock, 1e-3 / 1.3)],
        "best": [best],
    }
    policy = evolve(
        fast_policy,
        seed=6,
        max_rounds=20,
        pool_variance=False,
        settle_tolerance=None,
        settle_time_s=0.0,
        settle_min_calls=1,
    )
    result = run_race(cands, [1], "base", 1.25, policy, clock=clock)
    fast = result.candidate("fast")
    assert fast.verdict == "faster" and fast.resolved_at_round == policy.min_rounds
    assert result.rounds > fast.resolved_at_round
    base = result.candidate("base").round_scores
    diffs = [b - f for b, f in zip(base, fast.round_scores) if b is not None and f is not None]
    assert len(diffs) == result.rounds
    assert fast.speedup_vs_baseline.rounds == len(diffs)
    assert fast.speedup_vs_baseline.point == pytest.approx(math.exp(sum(diffs) / len(diffs)))


def test_cancellation_during_warm_up_stops_before_any_round(fast_policy) -> None:
    clock = FakeClock()
    asked = []

    def should_continue() -> bool:
        asked.append(True)
        return len(asked) < 2  # one warm-up, then the host cancels

    cands = {name: [fixed_latency(clock, 1e-3)] for name in ("a", "b", "c")}
    result = run_race(
        cands, [1], "a", 1.02, fast_policy, clock=clock, should_continue=should_continue
    )
    assert result.stop_reason == "cancelled" and result.rounds == 0
    assert sum(1 for c in result.candidates if c.warmup_calls) == 1
    assert result.faster == ()


def test_a_native_plan_stays_in_the_rounds_until_the_leader_clears_it(fast_policy) -> None:
    # "native" (1.2x) may become the baseline after the race: it is never eliminated, and
    # the race goes on until the leader (2x) has cleared min_speedup against it too, so
    # the selection can judge the leader against it on the same rounds.
    quiet = NoiseModel(jitter=0.01, spike_probability=0.0, drift_amplitude=0.0, switch_penalty=0.0)
    result = run_simulated_race(
        {"base": [1e-3], "native": [1e-3 / 1.2], "fast": [0.5e-3], "mid": [1e-3 / 1.1]},
        baseline="base",
        min_speedup=1.02,
        policy=fast_policy,
        noise=quiet,
        seed=2,
        natives=["native"],
    )
    assert result.family_size == 3 * 2
    native = result.candidate("native")
    assert native.verdict == "faster" and native.dropped_at_round is None
    assert all(score is not None for score in native.round_scores)
    assert result.candidate("mid").dropped_at_round is not None  # an ordinary challenger
    head = result.paired_speedup("fast", "native")
    assert head.low is not None and head.low >= 1.02


def test_an_automatic_budget_covers_min_rounds_when_later_rounds_cost_more(fast_policy) -> None:
    # Calls slow down as the race goes on, so the first round (which sizes the automatic
    # budget) is its cheapest: the budget must still cover min_rounds.
    clock = FakeClock()

    def slowing() -> object:
        calls = 0

        def call() -> None:
            nonlocal calls
            calls += 1
            clock.advance(1e-3 * (1 + calls / 20))

        return call

    policy = evolve(
        fast_policy,
        min_rounds=20,
        max_rounds=20,
        auto_budget_min_s=1e-6,
        auto_budget_max_s=1e4,
        futility_confidence=None,
        seed=0,
    )
    result = run_race({"a": [slowing()], "b": [slowing()]}, [1], "a", 1.02, policy, clock=clock)
    assert result.stop_reason != "time_budget"
    assert result.rounds == policy.min_rounds


def test_rounds_slower_than_the_budget_was_sized_for_run_on_to_the_least_rounds(fast_policy):
    # A busy machine slows the baseline's calls: a budget sized for quick rounds ends after
    # one, though a plan 100x faster needs only the least rounds to be confirmed.
    def race(ceiling_s):
        clock = FakeClock()
        plans = {"eager": [fixed_latency(clock, 0.1)], "fast": [fixed_latency(clock, 0.001)]}
        policy = evolve(fast_policy, max_time_s=1.0, warmup_max_calls=2, seed=3)
        return run_race(
            plans, [1], "eager", 1.02, policy, clock=clock, min_rounds_ceiling_s=ceiling_s
        )

    cut = race(None)  # a fixed budget with no ceiling: as before
    assert cut.rounds < fast_policy.min_rounds and cut.stop_reason == "time_budget"
    assert cut.candidate("fast").verdict != "faster"
    confirmed = race(10.0)
    assert confirmed.rounds == fast_policy.min_rounds
    assert confirmed.candidate("fast").verdict == "faster"
    assert confirmed.total_time_s <= 10.0
    held = race(1.3)  # the ceiling holds: no round that would run past it
    assert held.rounds < fast_policy.min_rounds and held.total_time_s <= 1.3
