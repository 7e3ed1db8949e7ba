"""The sequential rule's statistics: the Pocock boundary, pooled variance, paired scores."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special, stats

from dlopt.measurement.sequential import (
    _crossing_probability,
    _smallest_t_tails,
    boundary,
    pair_stats,
    per_look_level,
    pocock_constant,
    pooled_variance,
    rounds_to_reach,
    scores_of,
)


@pytest.mark.parametrize(("alpha", "last"), [(0.05, 40), (0.05 / 16, 100)])
def test_pocock_constant_holds_its_level_over_every_look(alpha, last) -> None:
    c = pocock_constant(alpha, 3, last)
    # Between one look's quantile and a Bonferroni split over every look.
    assert stats.norm.isf(alpha) < c < stats.norm.isf(alpha / (last - 2))
    assert _crossing_probability(c, 3, last) == pytest.approx(alpha, rel=0.01)
    # Monte Carlo of the random walk it is calibrated on.
    rng = np.random.default_rng(0)
    paths = 100_000
    walk = np.cumsum(rng.standard_normal((paths, last)), axis=1)
    z = walk / np.sqrt(np.arange(1, last + 1))
    crossed = float((z[:, 2:] >= c).any(axis=1).mean())
    se = math.sqrt(alpha * (1 - alpha) / paths)
    assert abs(crossed - alpha) < 4 * se + 0.002 * alpha


@pytest.mark.parametrize("first_df", [1, 2, 5])
def test_smallest_t_tails_equal_the_tail_of_every_look(first_df) -> None:
    # Rows of t statistics with every sign pattern (all negative rows included) and a
    # few exact ties; the pruned evaluation must return what evaluating every look does.
    rng = np.random.default_rng(first_df)
    t = rng.standard_normal((4000, 30)) * rng.choice([0.3, 1.0, 3.0], size=(4000, 1))
    t[:500] = -np.abs(t[:500])
    t[500:600] = np.abs(t[500:600])
    t[600:650, 5] = t[600:650, 6]
    df = np.arange(first_df, first_df + 30, dtype=float)
    every_look = special.stdtr(np.broadcast_to(df, t.shape), -t).min(axis=1)
    np.testing.assert_array_equal(_smallest_t_tails(t, df), every_look)


def test_boundary_is_a_t_quantile_at_the_per_look_level() -> None:
    level = per_look_level(0.05, 3, 40)
    assert boundary(0.05, 3, 40, 10) == pytest.approx(stats.t.isf(level, 10))
    # Fewer degrees of freedom, a wider boundary; more looks, a wider one too.
    assert boundary(0.05, 3, 40, 4) > boundary(0.05, 3, 40, 40)
    assert boundary(0.05, 3, 100, 20) > boundary(0.05, 3, 20, 20)


def test_pooled_variance_recovers_the_residual_variance_of_a_two_way_layout() -> None:
    rng = np.random.default_rng(3)
    plans, rounds, sigma = 6, 40, 0.05
    plan_effect = rng.normal(0, 0.5, plans)
    round_effect = rng.normal(0, 0.3, rounds)  # drift common to a round: must not count
    table = plan_effect[:, None] + round_effect[None, :] + rng.normal(0, sigma, (plans, rounds))
    scores = {f"p{i}": {r + 1: float(table[i, r]) for r in range(rounds)} for i in range(plans)}
    pooled = pooled_variance(scores)
    assert pooled is not None
    assert pooled.plans == frozenset(scores)  # homogeneous: every plan is pooled
    assert pooled.df == (plans - 1) * (rounds - 1)
    assert math.sqrt(pooled.variance) == pytest.approx(sigma, rel=0.1)
    pairs = [
        pair_stats(scores[f"p{i}"], scores[f"p{j}"], pooled) for i in range(6) for j in range(i)
    ]
    used = [p for p in pairs if p is not None and p.pooled]
    assert len(used) >= len(pairs) // 2  # the loose pair check sends some back, not most
    for pair in used:
        assert pair.df == pooled.df and pair.sd == pytest.approx(math.sqrt(2 * pooled.variance))
    # Two plans: nothing to pool.
    assert pooled_variance({k: scores[k] for k in ("p0", "p1")}) is None


def test_a_plan_much_noisier_than_the_rest_stays_out_of_the_pool() -> None:
    rng = np.random.default_rng(2)
    rounds = 20
    scores = {f"p{i}": {r + 1: float(rng.normal(0, 0.01)) for r in range(rounds)} for i in range(5)}
    scores["noisy"] = {r + 1: float(rng.normal(0, 0.2)) for r in range(rounds)}
    pooled = pooled_variance(scores)
    assert pooled is not None and "noisy" not in pooled.plans and len(pooled.plans) == 5
    assert math.sqrt(pooled.variance) == pytest.approx(0.01, rel=0.25)
    quiet = pair_stats(scores["p0"], scores["p1"], pooled)
    loud = pair_stats(scores["p0"], scores["noisy"], pooled)
    assert quiet is not None and quiet.pooled and quiet.df == pooled.df
    assert loud is not None and not loud.pooled and loud.df == rounds - 1
    assert loud.sd > 5 * quiet.sd


def test_scores_are_log_traffic_weighted_costs_and_skip_incomplete_rounds() -> None:
    # Case 1 is missing in round 2: that round has no score (nothing is misaligned).
    per_case = [{1: 2e-3, 2: 2e-3, 3: 2e-3}, {1: 4e-3, 3: 8e-3}]
    scores = scores_of(per_case, [0.75, 0.25])
    assert sorted(scores) == [1, 3]
    assert scores[1] == pytest.approx(math.log(0.75 * 2e-3 + 0.25 * 4e-3))
    assert scores[3] == pytest.approx(math.log(0.75 * 2e-3 + 0.25 * 8e-3))


def test_rounds_to_reach() -> None:
    assert rounds_to_reach(0.1, 0.05, 2.0) == pytest.approx(16.0)
    assert rounds_to_reach(0.1, 0.0, 2.0) == math.inf
    assert rounds_to_reach(0.0, 0.05, 2.0) == 0.0


def test_t_statistics_hold_the_level_only_with_the_t_calibration() -> None:
    # Fresh normal paths (not the calibration's seed), t statistics re-estimated at every
    # look 3..20: the boundary holds alpha; turning the known-variance constant into t
    # quantiles at the same nominal level would not (the shared variance estimate makes
    # early looks err together).
    rng = np.random.default_rng(7)
    last, paths, alpha = 20, 100_000, 0.05
    n = np.arange(1, last + 1, dtype=float)
    draws = rng.standard_normal((paths, last))
    mean = np.cumsum(draws, axis=1) / n
    with np.errstate(divide="ignore", invalid="ignore"):
        var = (np.cumsum(draws * draws, axis=1) - n * mean * mean) / (n - 1)
        t = mean / np.sqrt(var / n)
    looks = range(3, last + 1)
    ours = np.array([boundary(alpha, 3, last, k - 1) for k in looks])
    z_level = float(stats.norm.sf(pocock_constant(alpha, 3, last)))
    naive = np.array([stats.t.isf(z_level, k - 1) for k in looks])
    crossed_ours = float((t[:, 2:] >= ours).any(axis=1).mean())
    crossed_naive = float((t[:, 2:] >= naive).any(axis=1).mean())
    print(
        f"\nlooks 3..20, alpha 5%: t-calibrated {crossed_ours:.2%}, z-calibrated {crossed_naive:.2%}"
    )
    se = math.sqrt(alpha * (1 - alpha) / paths)
    assert crossed_ours <= alpha + 3 * se
    assert crossed_naive > alpha + 5 * se
