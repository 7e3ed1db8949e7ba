"""The selection's secondary rule: plans within the indifference zone of the leader."""

from __future__ import annotations

from dlopt.measurement import RatioInterval
from dlopt.selection.rules import EAGER, Costs, choose


def iv(low: float, point: float, high: float) -> RatioInterval:
    return RatioInterval(point, low, high, 0.95, "test", 10)


TABLE = {
    ("a", EAGER): iv(1.70, 1.90, 2.10),  # the best point
    ("b", EAGER): iv(1.65, 1.88, 2.05),
    ("c", EAGER): iv(1.40, 1.60, 1.80),
    ("b", "a"): iv(0.985, 0.99, 0.995),  # b is shown within 2% of a
    ("c", "a"): iv(0.80, 0.84, 0.88),  # c is clearly slower
    ("a", "b"): iv(1.005, 1.01, 1.015),
    ("a", "c"): iv(1.13, 1.19, 1.25),
    ("b", "c"): iv(1.12, 1.18, 1.24),
    ("c", "b"): iv(0.81, 0.85, 0.89),
}


def run(costs: dict[str, tuple[float, float | None]], zone: float) -> tuple[str, str]:
    eligible = [Costs(EAGER, 0.0, 0.0, 2.0)] + [
        Costs(name, setup, 0.0, 1.0, peak_memory_mb=memory)
        for name, (setup, memory) in costs.items()
    ]
    outcome = choose(
        objective="steady_state_latency",
        min_speedup=1.02,
        expected_calls=None,
        eligible=eligible,
        steady_speedup=lambda n, m: TABLE[(n, m)],
        confidence=0.95,
        indifference_zone=zone,
    )
    return outcome.selected, outcome.reason


def test_within_the_zone_the_cheaper_plan_to_set_up_serves() -> None:
    selected, reason = run({"a": (30.0, 100.0), "b": (2.0, 100.0), "c": (0.1, 10.0)}, 1.02)
    assert selected == "b"  # c is cheaper still, but clearly slower: outside the zone
    assert "indifference zone" in reason and "b serves instead of a" in reason


def test_equal_one_off_costs_fall_to_the_lower_peak_memory() -> None:
    selected, _ = run({"a": (1.0, 500.0), "b": (1.0, 200.0), "c": (1.0, 10.0)}, 1.02)
    assert selected == "b"


def test_without_a_zone_the_best_point_serves() -> None:
    selected, reason = run({"a": (30.0, 100.0), "b": (2.0, 100.0), "c": (0.1, 10.0)}, 1.0)
    assert selected == "a" and "indifference" not in reason


def test_a_plan_that_wins_head_to_head_ranks_first() -> None:
    # b's point against the baseline is lower, but paired over every round b beats a.
    table = dict(TABLE)
    table[("b", "a")] = iv(1.01, 1.03, 1.05)
    table[("a", "b")] = iv(0.95, 0.97, 0.99)
    outcome = choose(
        objective="steady_state_latency",
        min_speedup=1.02,
        expected_calls=None,
        eligible=[Costs(EAGER, 0, 0, 2.0), Costs("a", 0, 0, 1.0), Costs("b", 0, 0, 1.0)],
        steady_speedup=lambda n, m: table[(n, m)],
        confidence=0.95,
    )
    assert outcome.selected == "b" and "ranks first head to head" in outcome.reason
