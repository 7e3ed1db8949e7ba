"""Error rates of the race on the simulated machine (fake clock: exact, seconds to run).

Noise model (``NoiseModel()`` defaults): slow drift common to a round (10% amplitude,
1 s period), 2% per-call jitter, 1% of calls spike by 20%, and a 30% interference penalty
on the first call after another plan ran.
"""

from __future__ import annotations

import statistics

from attrs import evolve

from dlopt.measurement.simulation import NoiseModel, run_simulated_fixed, run_simulated_race

L = 1e-3  # 1 ms calls
RACES = 500


def verdicts(latencies, min_speedup, policy, noise=None, races=RACES, seeds=None):
    results = [
        run_simulated_race(
            latencies,
            baseline="base",
            min_speedup=min_speedup,
            policy=policy,
            noise=noise(seed) if callable(noise) else noise,
            seed=seed,
        )
        for seed in (seeds if seeds is not None else range(races))
    ]
    return [r.candidate("ch").verdict for r in results], results


def test_a_vs_a_declares_a_difference_no_more_often_than_alpha(fast_policy) -> None:
    # min_speedup = 1.0 is the strictest setting: any interval that excludes 1 at any of
    # the up to 17 looks counts as an error, in either direction. Futility stopping is off
    # so that every race runs to its last look: the worst case for repeated looks.
    alpha = 1 - fast_policy.confidence
    policy = evolve(fast_policy, max_rounds=20, futility_confidence=None)
    v, results = verdicts({"base": [L], "ch": [L]}, 1.0, policy)
    declared = sum(x in ("faster", "not_faster") for x in v) / len(v)
    print(f"\nA vs A, min_speedup=1.0: {len(v)} races, difference declared in {declared:.1%}")
    assert declared <= alpha
    assert all(r.stop_reason in ("max_rounds", "resolved") for r in results)


def test_a_vs_a_never_switches_more_than_alpha_at_the_usual_threshold(fast_policy) -> None:
    v, results = verdicts({"base": [L], "ch": [L]}, 1.02, fast_policy)
    switched = v.count("faster") / len(v)
    rounds = [r.rounds for r in results]
    print(
        f"\nA vs A, min_speedup=1.02: switched {switched:.1%}, not_faster {v.count('not_faster') / len(v):.1%}, "
        f"rounds median {statistics.median(rounds)}, p90 {statistics.quantiles(rounds, n=10)[-1]}"
    )
    assert switched <= (1 - fast_policy.confidence) / 2
    # Futility: most races stop at the first look, "unresolved", saying why.
    futile = [r for r in results if r.stop_reason == "futility"]
    assert len(futile) > len(results) / 2
    assert all(r.candidate("ch").verdict == "unresolved" for r in futile)
    assert all("futility" in r.candidate("ch").note for r in futile)


def test_a_ten_percent_gain_is_found(fast_policy) -> None:
    v, results = verdicts({"base": [L], "ch": [L / 1.10]}, 1.02, fast_policy)
    found = v.count("faster") / len(v)
    rounds = [r.rounds for r in results]
    timed = [r.timed_calls for r in results]
    p90 = statistics.quantiles(rounds, n=10)[-1]
    print(
        f"\n10% faster, min_speedup=1.02: found in {found:.1%} of {len(v)} races; rounds median "
        f"{statistics.median(rounds)}, p90 {p90}; timed calls median {statistics.median(timed)}"
    )
    assert found >= 0.95
    assert v.count("not_faster") == 0


def test_a_slowdown_halfway_fools_back_to_back_timing_but_not_the_race(fast_policy) -> None:
    # A vs A; the machine slows down by 25% at some moment. Back-to-back timing of the
    # challenger first (65 calls) and then the baseline sees the challenger 25% faster.
    step = NoiseModel(step_at_s=0.065, step_factor=1.25)
    fooled = [
        run_simulated_fixed(
            {"ch": [L], "base": [L]}, baseline="base", min_speedup=1.02, noise=step, seed=s
        ).verdict["ch"]
        == "faster"
        for s in range(100)
    ]
    assert sum(fooled) >= 90
    # The race, with the slowdown at a different moment in each race (early, middle, late).
    v, _ = verdicts(
        {"ch": [L], "base": [L]},
        1.02,
        fast_policy,
        noise=lambda seed: NoiseModel(step_at_s=0.02 + 0.001 * seed, step_factor=1.25),
        races=300,
    )
    switched = v.count("faster") / len(v)
    print(
        f"\nslowdown at a random moment: back-to-back fooled {sum(fooled)}%, race switched {switched:.1%}"
    )
    assert switched <= (1 - fast_policy.confidence) / 2


def test_a_real_gain_survives_a_slowdown_halfway(fast_policy) -> None:
    step = NoiseModel(step_at_s=0.065, step_factor=1.25)
    missed_fixed = [
        run_simulated_fixed(
            {"base": [L], "ch": [L / 1.1]}, baseline="base", min_speedup=1.02, noise=step, seed=s
        ).verdict["ch"]
        != "faster"
        for s in range(100)
    ]
    assert sum(missed_fixed) >= 90  # back-to-back: the slowdown hides the gain
    v, _ = verdicts({"base": [L], "ch": [L / 1.1]}, 1.02, fast_policy, noise=step, races=200)
    assert v.count("faster") / len(v) >= 0.95


def test_budget_exhausted_is_unresolved_never_a_switch(fast_policy) -> None:
    # 1% faster against a 2% threshold, 8 rounds at most: a switch would be an error.
    policy = evolve(fast_policy, max_rounds=8)
    v, results = verdicts({"base": [L], "ch": [L / 1.01]}, 1.02, policy, races=200)
    assert "faster" not in v
    for verdict, result in zip(v, results):
        if result.stop_reason == "max_rounds":
            assert verdict == "unresolved"
            assert result.faster == ()
    assert v.count("unresolved") > 0
