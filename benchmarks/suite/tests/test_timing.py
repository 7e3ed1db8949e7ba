"""The oracle's schedule and statistics, on a fake clock."""

from __future__ import annotations

import pytest

from benchmarks.suite.timing import (
    MedianInterval,
    OracleSettings,
    is_settled,
    median_interval,
    time_interleaved,
)


def test_median_interval_uses_the_binomial_ranks():
    # The classic table: n=10 -> ranks 2 and 9 (97.9%); n=100 -> ranks 40 and 61.
    ten = median_interval([float(v) for v in range(1, 11)])
    assert (ten.low, ten.median, ten.high) == (2.0, 5.5, 9.0)
    assert ten.coverage == pytest.approx(1 - 2 * 11 / 1024)
    hundred = median_interval([float(v) for v in range(1, 101)])
    assert (hundred.low, hundred.high) == (40.0, 61.0)
    assert hundred.coverage >= 0.95


def test_median_interval_of_few_values_is_the_range_with_its_lower_coverage():
    few = median_interval([3.0, 1.0, 2.0])
    assert (few.low, few.median, few.high) == (1.0, 2.0, 3.0)
    assert few.coverage == pytest.approx(0.75)


def test_median_interval_refuses_bad_input():
    with pytest.raises(ValueError, match="at least one value"):
        median_interval([])
    with pytest.raises(ValueError, match="confidence"):
        median_interval([1.0], confidence=1.5)


def test_clear_winner_settles_at_min_rounds_with_exact_latencies(clock):
    plans = {
        "slow": {"a": clock.plan("slow", "a", [2.0])},
        "fast": {"a": clock.plan("fast", "a", [1.0])},
    }
    settings = OracleSettings(
        min_rounds=6, max_rounds=50, settle_calls=2, settle_time_s=0.0, timed_calls=3
    )
    timing = time_interleaved(plans, {"a": 1.0}, settings, clock=clock)
    assert timing.settled and timing.stop_reason == "settled"
    assert timing.rounds == 6
    assert [p.name for p in timing.ranking()] == ["fast", "slow"]
    fast = next(p for p in timing.plans if p.name == "fast")
    assert fast.latency.median == pytest.approx(1.0)
    # Every visit is a burst: settle + timed calls of one plan back to back.
    assert len(clock.log) == 6 * 2 * (2 + 3)
    bursts = [clock.log[i : i + 5] for i in range(0, len(clock.log), 5)]
    assert all(len(set(burst)) == 1 for burst in bursts)


def test_plans_are_visited_in_a_fresh_random_order_each_round(clock, one_call_bursts):
    names = [f"p{i}" for i in range(5)]
    plans = {n: {"a": clock.plan(n, "a", [1.0 + i])} for i, n in enumerate(names)}
    settings = one_call_bursts(min_rounds=8, max_rounds=8)
    time_interleaved(plans, {"a": 1.0}, settings, clock=clock, keep=names)
    orders = {tuple(name for name, _ in clock.log[r * 5 : r * 5 + 5]) for r in range(8)}
    assert len(orders) > 1  # not one fixed order
    assert all(sorted(order) == names for order in orders)


def test_weighted_cases_give_the_traffic_weighted_latency(clock):
    plans = {
        "x": {"b1": clock.plan("x", "b1", [1.0]), "b8": clock.plan("x", "b8", [5.0])},
        "y": {"b1": clock.plan("y", "b1", [2.0]), "b8": clock.plan("y", "b8", [3.0])},
    }
    settings = OracleSettings(min_rounds=5, max_rounds=5, settle_time_s=0.0)
    timing = time_interleaved(plans, {"b1": 70, "b8": 30}, settings, clock=clock)
    by_name = {p.name: p for p in timing.plans}
    assert by_name["x"].latency.median == pytest.approx(0.7 * 1 + 0.3 * 5)  # 2.2
    assert by_name["y"].latency.median == pytest.approx(0.7 * 2 + 0.3 * 3)  # 2.3
    assert by_name["x"].case_median_ms == pytest.approx({"b1": 1.0, "b8": 5.0})


def test_overlapping_plans_run_to_the_round_cap_and_say_so(clock, one_call_bursts):
    # Medians 1.0 vs 1.05; round by round "b" is 3x slower, 5% slower or 3x faster:
    # the ratio's interval spans 1, beyond a 1% tie.
    plans = {
        "a": {"c": clock.plan("a", "c", [0.5, 1.0, 1.5])},
        "b": {"c": clock.plan("b", "c", [1.55, 1.05, 0.55])},
    }
    settings = one_call_bursts(min_rounds=3, max_rounds=12)
    timing = time_interleaved(plans, {"c": 1.0}, settings, clock=clock)
    assert not timing.settled and timing.stop_reason == "max_rounds" and timing.rounds == 12


def test_the_time_cap_stops_the_rounds(clock, one_call_bursts):
    plans = {
        "a": {"c": clock.plan("a", "c", [50.0, 100.0, 150.0])},
        "b": {"c": clock.plan("b", "c", [155.0, 95.0, 55.0])},
    }
    settings = one_call_bursts(
        min_rounds=2,
        max_rounds=1000,
        max_time_s=5.0,
    )
    timing = time_interleaved(plans, {"c": 1.0}, settings, clock=clock)
    assert timing.stop_reason == "max_time" and timing.rounds < 1000
    assert timing.time_s >= 5.0


def test_a_tie_within_the_tolerance_counts_as_settled():
    tie = {"b": MedianInterval(1.001, 0.996, 1.006, 20, 0.95)}
    assert is_settled(tie, tie_tolerance=0.01)
    assert not is_settled(tie, tie_tolerance=0.001)
    slower = {"b": MedianInterval(1.05, 1.001, 1.2, 20, 0.95)}
    assert is_settled(slower, tie_tolerance=0.001)
    open_question = {"b": MedianInterval(1.05, 0.999, 1.2, 20, 0.95)}
    assert not is_settled(open_question, tie_tolerance=0.01)


def test_pairing_settles_plans_that_a_slow_spell_slows_together(clock, one_call_bursts):
    # The machine's speed swings 3x from round to round; "b" is 5% slower in every round.
    # Unpaired, the two medians' intervals overlap for ever; round by round it is plain.
    swings = [1.0, 2.0, 3.0, 2.5, 1.5]
    plans = {
        "a": {"c": clock.plan("a", "c", swings)},
        "b": {"c": clock.plan("b", "c", [1.05 * v for v in swings])},
    }
    settings = one_call_bursts(min_rounds=10, max_rounds=200)
    timing = time_interleaved(plans, {"c": 1.0}, settings, clock=clock)
    assert timing.settled and timing.rounds == 10
    by_name = {p.name: p for p in timing.plans}
    assert by_name["a"].vs_leader is None  # the leader
    ratio = by_name["b"].vs_leader
    assert ratio.median == pytest.approx(1.05) and ratio.low == pytest.approx(1.05)
    assert by_name["b"].latency.low < by_name["a"].latency.high  # unpaired: overlapping


def test_a_plan_settled_slower_leaves_after_min_rounds_picks_too(clock, one_call_bursts):
    plans = {
        # An unresolved near-tie keeps the rounds going to the cap.
        "a": {"c": clock.plan("a", "c", [1.0, 1.1])},
        "b": {"c": clock.plan("b", "c", [1.1, 1.0])},
        "mid": {"c": clock.plan("mid", "c", [1.5])},
        "mid_pick": {"c": clock.plan("mid_pick", "c", [1.5])},
        "near": {"c": clock.plan("near", "c", [1.005 * 1.0, 1.005 * 1.1])},
    }
    settings = one_call_bursts(min_rounds=6, max_rounds=20)
    timing = time_interleaved(plans, {"c": 1.0}, settings, clock=clock, keep={"mid_pick"})
    assert timing.stop_reason == "max_rounds" and timing.rounds == 20
    by_name = {p.name: p for p in timing.plans}
    for name in ("mid", "mid_pick"):
        assert by_name[name].dropped_after == 6 and len(by_name[name].rounds_ms) == 6
        assert by_name[name].left_because == "settled slower than the leader"
        assert by_name[name].vs_leader.low > 1.01
    # Within the tolerance of the leader: timed to the end.
    assert by_name["near"].dropped_after is None and len(by_name["near"].rounds_ms) == 20
    assert sum(1 for name, _ in clock.log if name == "mid") == 6


def test_plans_must_cover_the_same_cases():
    with pytest.raises(ValueError, match="expected"):
        time_interleaved({"a": {"x": lambda: None}}, {"y": 1.0}, OracleSettings())
    with pytest.raises(ValueError, match="at least one plan"):
        time_interleaved({}, {"y": 1.0}, OracleSettings())


def test_a_burst_settles_for_its_time_then_times_its_calls(clock):
    plans = {"a": {"c": clock.plan("a", "c", [10.0])}}
    settings = OracleSettings(
        min_rounds=1, max_rounds=1, settle_calls=2, settle_time_s=0.05, timed_calls=3
    )
    time_interleaved(plans, {"c": 1.0}, settings, clock=clock)
    assert len(clock.log) == 5 + 3  # 5 x 10 ms of settling reach 50 ms, then 3 timed
    clock.log.clear()
    plans = {"a": {"c": clock.plan("a", "c", [10.0])}}
    settings = OracleSettings(
        min_rounds=1, max_rounds=1, settle_time_s=10.0, settle_max_calls=7, timed_calls=1
    )
    time_interleaved(plans, {"c": 1.0}, settings, clock=clock)
    assert len(clock.log) == 7 + 1


def test_a_clearly_slower_plan_leaves_the_rounds_unless_it_is_kept(clock, one_call_bursts):
    plans = {
        "fast": {"c": clock.plan("fast", "c", [1.0, 1.2])},
        "close": {"c": clock.plan("close", "c", [1.1, 1.3])},
        "slow": {"c": clock.plan("slow", "c", [100.0])},
        "slow_pick": {"c": clock.plan("slow_pick", "c", [100.0])},
    }
    settings = one_call_bursts(min_rounds=8, max_rounds=8)
    timing = time_interleaved(plans, {"c": 1.0}, settings, clock=clock, keep={"slow_pick"})
    by_name = {p.name: p for p in timing.plans}
    assert by_name["slow"].dropped_after == 3 and len(by_name["slow"].rounds_ms) == 3
    assert by_name["slow"].left_because == "> 2x the leader"
    # Its ratio is to the final leader, over the rounds both ran.
    assert by_name["slow"].vs_leader.median == pytest.approx(100.0)
    assert by_name["slow"].latency.median == pytest.approx(100.0)
    # Kept past round 3; at the first look (round 8) it is settled slower and may leave.
    assert len(by_name["slow_pick"].rounds_ms) == 8
    # Within 2x of the leader: timed on past round 3, to the first look.
    assert len(by_name["close"].rounds_ms) == 8
    assert sum(1 for name, _ in clock.log if name == "slow") == 3


def test_the_time_cap_holds_before_min_rounds(clock, one_call_bursts):
    plans = {"a": {"c": clock.plan("a", "c", [1000.0])}, "b": {"c": clock.plan("b", "c", [1500.0])}}
    settings = one_call_bursts(
        min_rounds=15,
        max_rounds=100,
        max_time_s=5.0,
        drop_factor=10.0,
    )
    timing = time_interleaved(plans, {"c": 1.0}, settings, clock=clock)
    assert timing.stop_reason == "max_time" and not timing.settled
    assert timing.rounds == 2  # 2.5 s a round: the cap is passed after the second


def test_a_plan_that_left_unresolved_against_the_final_leader_unsettles_the_ranking(
    clock, one_call_bursts
):
    # "c" leaves at round 6, 5% slower than "a", then the leader of the rounds. "a" then
    # slows down for good and "b" leads; against "b" over its six rounds "c" is a tie
    # that needed more rounds. The rounds end settled among "a" and "b" only.
    plans = {
        "a": {"x": clock.plan("a", "x", [1.0] * 6 + [2.0] * 54)},
        "b": {"x": clock.plan("b", "x", [1.0, 1.1])},
        "c": {"x": clock.plan("c", "x", [1.05])},
    }
    settings = one_call_bursts(min_rounds=6, max_rounds=60)
    timing = time_interleaved(plans, {"x": 1.0}, settings, clock=clock)
    by_name = {p.name: p for p in timing.plans}
    assert by_name["c"].dropped_after == 6
    assert by_name["a"].left_because == "settled slower than the leader"
    assert by_name["b"].vs_leader is None  # the final leader
    ratio = by_name["c"].vs_leader
    assert ratio.low < 1.0 < ratio.high
    assert timing.stop_reason == "left_unresolved" and not timing.settled
