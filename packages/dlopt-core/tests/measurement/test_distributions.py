"""The race's distributions, computed in plain Python, agree with scipy.stats; and a race
never imports scipy (scipy.stats took 0.5-0.9 s and scipy.special 0.15-0.25 s of every
decision)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from scipy import stats

from dlopt.measurement import distributions
from dlopt.measurement.distributions import f_upper_quantile, t_quantile, t_sf
from dlopt.measurement.sequential import look_confidence
from dlopt.measurement.stats import bootstrap_mean_interval
from dlopt.selection.throughput import quantile_upper_bound

DEGREES = [1, 2, 3, 4, 7, 30, 57, 400, 2000]
LEVELS = [0.6, 0.9, 0.975, 0.999, 1 - 1e-5, 1 - 1e-9, 0.1, 1e-4]


@pytest.mark.parametrize("df", DEGREES)
@pytest.mark.parametrize("q", LEVELS)
def test_t_quantile_and_tail_agree_with_scipy_stats(q: float, df: int) -> None:
    assert t_quantile(q, df) == pytest.approx(stats.t.ppf(q, df), rel=1e-10)
    x = float(stats.t.ppf(q, df))
    assert t_sf(x, df) == pytest.approx(stats.t.sf(x, df), rel=1e-10)
    assert look_confidence(x, df) == pytest.approx(q, rel=1e-10)


@pytest.mark.parametrize("dfn", [1, 2, 5, 40])
@pytest.mark.parametrize("dfd", [1, 4, 30, 1000])
@pytest.mark.parametrize("level", [0.4, 0.05, 1e-3, 1e-6])
def test_f_upper_quantile_agrees_with_scipy_stats(dfn: int, dfd: int, level: float) -> None:
    assert f_upper_quantile(level, dfn, dfd) == pytest.approx(
        stats.f.isf(level, dfn, dfd), rel=1e-9
    )
    x = float(stats.f.isf(level, dfn, dfd))
    assert distributions.f_sf(x, dfn, dfd) == pytest.approx(level, rel=1e-9)


@pytest.mark.parametrize("level", [0.0, 1.0, 1.5])
def test_an_f_level_outside_zero_and_one_is_refused(level: float) -> None:
    with pytest.raises(ValueError, match="in \\(0, 1\\)"):
        f_upper_quantile(level, 2, 10)


@pytest.mark.parametrize("p", [1e-12, 1e-4, 0.3, 0.5, 0.975, 1 - 1e-9])
def test_normal_agrees_with_scipy_stats(p: float) -> None:
    x = distributions.normal_quantile(p)
    assert x == pytest.approx(stats.norm.ppf(p), rel=1e-12, abs=1e-15)
    assert distributions.normal_sf(x) == pytest.approx(stats.norm.sf(x), rel=1e-12)


@pytest.mark.parametrize("n", [1, 5, 20, 459, 2000, 10_000])
@pytest.mark.parametrize(("p", "q"), [(0.99, 0.99), (0.999, 0.99), (0.95, 0.5), (0.99, 0.9)])
def test_binomial_quantile_is_scipy_stats_binom_ppf(n: int, p: float, q: float) -> None:
    assert distributions.binomial_quantile(p, n, q) == int(stats.binom.ppf(p, n, q))


@pytest.mark.parametrize("n", [1, 20, 459, 2000])
def test_quantile_upper_bound_is_the_binomial_order_statistic(n: int) -> None:
    samples = list(np.random.default_rng(n).lognormal(size=n))
    k = int(stats.binom.ppf(1 - 0.01, n, 0.99))
    expected = sorted(samples)[k] if k < n else None
    assert quantile_upper_bound(samples, 0.99, 0.01) == expected


def test_bootstrap_interval_is_close_to_scipy_stats_bca() -> None:
    values = np.random.default_rng(4).normal(0.2, 0.05, size=25)
    mean, low, high, method = bootstrap_mean_interval(values, 0.95, 4000, seed=1)
    theirs = stats.bootstrap(
        (values,), np.mean, confidence_level=0.95, n_resamples=4000, method="BCa",
        rng=np.random.default_rng(1),
    ).confidence_interval  # fmt: skip
    assert method == "BCa"
    assert mean == pytest.approx(values.mean())
    # Different resamples: the ends agree to a small share of the interval's width.
    width = high - low
    assert low == pytest.approx(theirs.low, abs=0.1 * width)
    assert high == pytest.approx(theirs.high, abs=0.1 * width)


def test_bootstrap_falls_back_to_percentile_when_bca_degenerates() -> None:
    # One resample lies on one side of the mean: BCa's bias correction is infinite.
    values = [0.1, 0.2, 0.3, 0.45]
    mean, low, high, method = bootstrap_mean_interval(values, 0.95, 1, seed=0)
    assert method == "percentile"
    assert low == high != mean


def test_a_race_and_its_p99_bound_never_import_scipy() -> None:
    program = textwrap.dedent(
        """
        import sys
        from dlopt.measurement import MeasurementPolicy
        from dlopt.selection.throughput import quantile_upper_bound
        from dlopt.testing.simulation import run_simulated_race

        result = run_simulated_race(
            {"eager": [2e-3], "fast": [1e-3], "slow": [1.5e-3]}, baseline="eager",
            min_speedup=1.05, policy=MeasurementPolicy(seed=3, bootstrap_resamples=200),
            seed=3,
        )
        assert result.candidate("fast").speedup_fixed_sample is not None
        assert quantile_upper_bound([1.0] * 500, 0.99, 0.01) == 1.0
        print(sorted(m for m in sys.modules if m == "scipy" or m.startswith("scipy.")))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "[]", out.stderr
