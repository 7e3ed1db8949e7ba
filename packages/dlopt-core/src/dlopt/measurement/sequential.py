"""The sequential rule: when a paired comparison is decided, which plans leave, when to stop.

Pure statistics over per-round scores, no clock and no callables; docs/measurement.md
explains each piece with the figures behind the defaults.

* **Scores.** Each round gives every measured plan one score: the log of its
  traffic-weighted cost, the weighted sum over cases of its burst statistics. Two plans
  are compared on the per-round differences of their scores (paired: drift common to a
  round cancels).
* **Variance.** The residual variance of the rounds x plans layout (two-way, plans and
  rounds as effects) is pooled over every plan still measured, with ``(n-1)(P-1)``
  degrees of freedom; a pair whose own spread fails an F check against the pooled value
  falls back to its own variance with ``n-1``.
* **Boundary.** One-sided Pocock-type group-sequential boundary: the same nominal level
  at every look, calibrated so that a race crosses at any look with probability
  ``alpha`` (:func:`per_look_level`): exactly for a known variance (recursive numerical
  integration, :func:`pocock_constant`) and by a fixed-seed Monte Carlo for t statistics;
  the stricter of the two, as a Student-t quantile at each look's degrees of freedom.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np
from attrs import frozen

from dlopt._version import __version__
from dlopt.measurement.distributions import (
    f_upper_quantile,
    normal_quantile,
    normal_sf,
    t_quantile,
    t_sf,
)
from dlopt.platform.fileio import (
    atomic_write_bytes,
    read_user_cache_entry,
    set_aside,
    user_cache_dir,
)

#: Grid step of the recursive integration (in units of one round's standard deviation).
_GRID_STEP = 0.05
#: Half-width of the Gaussian step kernel, in standard deviations.
_KERNEL_SDS = 8.0


def _normal_pdf(x: np.ndarray, scale: float = 1.0) -> np.ndarray:
    """The density of a mean-zero normal with standard deviation ``scale`` at ``x``."""
    return np.exp(-0.5 * (x / scale) ** 2) / (scale * math.sqrt(2.0 * math.pi))


def _crossing_probability(c: float, first: int, last: int) -> float:
    """``P(max_{first <= n <= last} S_n / sqrt(n) >= c)`` for a standard random walk."""
    h = _GRID_STEP
    low = -_KERNEL_SDS * math.sqrt(last) - c * math.sqrt(last)
    high = c * math.sqrt(last)
    grid = np.arange(low, high + h, h)
    # Density of S_first, cut at the first boundary.
    bound = c * math.sqrt(first)
    density = _normal_pdf(grid, scale=math.sqrt(first))
    crossed = normal_sf(bound / math.sqrt(first))
    density[grid >= bound] = 0.0
    offsets = np.arange(-_KERNEL_SDS, _KERNEL_SDS + h, h)
    kernel = _normal_pdf(offsets) * h
    half = len(offsets) // 2
    for n in range(first + 1, last + 1):
        moved = np.convolve(density, kernel)[half : half + len(grid)]
        bound = c * math.sqrt(n)
        over = grid >= bound
        crossed += float(moved[over].sum() * h)
        moved[over] = 0.0
        density = moved
    return crossed


@lru_cache(maxsize=256)
def pocock_constant(alpha: float, first: int, last: int) -> float:
    """The one-sided Pocock constant for looks at rounds ``first..last`` at level ``alpha``.

    Found by bisection on the exact crossing probability; cached (the race asks for a
    handful of levels).
    """
    if not 0.0 < alpha < 0.5:
        raise ValueError(f"alpha must be in (0, 0.5), got {alpha}")
    if last < first or first < 2:
        raise ValueError(f"looks must satisfy 2 <= first <= last, got {first}..{last}")
    lo = -normal_quantile(alpha)  # one look: the plain one-sided quantile
    hi = -normal_quantile(alpha / (last - first + 1))  # Bonferroni over every look
    if last == first:
        return lo
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        if _crossing_probability(mid, first, last) > alpha:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-4:
            break
    return hi


#: Paths of the Monte Carlo calibration (fixed seed: the same boundary on every run).
_CALIBRATION_PATHS = 200_000
_CALIBRATION_SEED = 20261203


@lru_cache(maxsize=16)
def _min_tail_probabilities(first: int, last: int) -> np.ndarray:
    """Per simulated race, the smallest one-sided t tail probability over looks
    ``first..last`` of a mean-zero normal sequence (sorted): the level ``a`` at which a
    fraction ``alpha`` of races cross any look is their ``alpha`` quantile.

    A few seconds per setting: computed once per machine and kept in the user cache
    directory (:func:`dlopt.platform.fileio.user_cache_dir`); the fixed seed makes it the
    same array everywhere, so a copy that cannot be read is simply computed again. The
    file is named by the dlopt version too: another release computes its own."""
    path = (
        user_cache_dir()
        / "boundaries"
        / (
            f"min-tails-{first}-{last}-{_CALIBRATION_PATHS}-{_CALIBRATION_SEED}"
            f"-dlopt{__version__}.npy"
        )
    )
    kept = _read_kept(path, _CALIBRATION_PATHS)
    if kept is not None:
        return kept
    simulated = _simulate_min_tails(first, last)
    with contextlib.suppress(OSError):  # a cache that cannot be written costs time only
        buffer = io.BytesIO()
        np.save(buffer, simulated, allow_pickle=False)
        atomic_write_bytes(path, buffer.getvalue())
    return simulated


def _read_kept(path: Path, length: int) -> np.ndarray | None:
    """A kept calibration array, or ``None`` when there is none that can be trusted (a
    file that is not a regular ``.npy`` of ``length`` sorted probabilities is set aside:
    a FIFO in its place can never hang the selection)."""
    data = read_user_cache_entry(path, length * 8 + 4096)
    if data is None:
        return None
    try:
        kept = np.load(io.BytesIO(data), allow_pickle=False)
    except (ValueError, EOFError, OSError) as exc:
        set_aside(path, f"not a readable .npy array: {exc}")
        return None
    ok = (
        isinstance(kept, np.ndarray)
        and kept.shape == (length,)
        and kept.dtype == np.float64
        and bool(np.all(np.diff(kept) >= 0))
        and bool(np.all((kept >= 0) & (kept <= 1)))
    )
    if not ok:
        set_aside(path, f"not {length} sorted probabilities")
        return None
    return kept


def _simulate_min_tails(first: int, last: int) -> np.ndarray:
    rng = np.random.default_rng(_CALIBRATION_SEED)
    n = np.arange(1, last + 1, dtype=float)
    chunk = 20_000
    out = []
    for _ in range(_CALIBRATION_PATHS // chunk):
        draws = rng.standard_normal((chunk, last))
        mean = np.cumsum(draws, axis=1) / n
        with np.errstate(divide="ignore", invalid="ignore"):
            var = (np.cumsum(draws * draws, axis=1) - n * mean * mean) / (n - 1)
            t = mean / np.sqrt(var / n)
        out.append(_smallest_t_tails(t[:, first - 1 :], n[first - 1 :] - 1))
    return np.sort(np.concatenate(out))


def _smallest_t_tails(t: np.ndarray, df: np.ndarray) -> np.ndarray:
    """Per row, ``min over columns of P(T_df > t)`` (Student t, ``df`` per column),
    computed exactly but with the costly t tail evaluated only where it can be the minimum.

    At a fixed ``t`` the tail is monotone in the degrees of freedom, so it lies between
    the normal tail (infinite df) and the tail at the smallest df in the row, both cheap
    closed forms. A column whose lower bound exceeds the row's smallest upper bound cannot
    hold the row's minimum; the rest (a few per row) get the exact tail. The result is the
    same as evaluating every column.
    """
    from scipy import special

    smallest_df = float(df.min())
    normal = special.ndtr(-t)
    if smallest_df >= 2:  # P(T_2 > t), closed form; df 2 is the heaviest tail in the row
        heavy = 0.5 - t / (2.0 * np.sqrt(t * t + 2.0))
    else:  # df 1: the Cauchy tail
        heavy = 0.5 - np.arctan(t) / np.pi
    low = np.minimum(normal, heavy)
    high = np.maximum(normal, heavy)
    # A relative slack for rounding in the bounds: a candidate too many is harmless.
    ceiling = high.min(axis=1, keepdims=True) * (1.0 + 1e-9) + 1e-300
    candidates = low <= ceiling
    tails = np.full(t.shape, np.inf)
    columns = np.broadcast_to(df, t.shape)
    tails[candidates] = special.stdtr(columns[candidates], -t[candidates])
    return tails.min(axis=1)


def prepare_boundary(first: int, last: int) -> None:
    """Run the boundary's calibration for looks ``first..last`` now (nothing for a
    tabulated setting; a few seconds the first time on a machine otherwise), so it is not
    charged to a race's time budget."""
    if last > first and (first, last) not in tabulated_levels():
        _min_tail_probabilities(first, last)


#: The levels of the settings the default race and a cache hit's recheck use, computed
#: by ``tools/tables.py boundaries`` and shipped with the package: no race pays their
#: calibration.
TABLE_FILE = "boundary_levels.json"
#: Ratio between neighbouring tabulated alphas; a level is read at the grid alpha just
#: below the one asked for (a little stricter, never looser).
ALPHA_GRID_RATIO = 1.05
ALPHA_GRID_LOW = 1e-6


def alpha_grid() -> np.ndarray:
    """The alphas a setting's levels are tabulated at, ascending, up to 0.5."""
    count = math.floor(math.log(0.5 / ALPHA_GRID_LOW) / math.log(ALPHA_GRID_RATIO)) + 1
    return ALPHA_GRID_LOW * ALPHA_GRID_RATIO ** np.arange(count)


@lru_cache(maxsize=1)
def tabulated_levels() -> dict[tuple[int, int], tuple[np.ndarray, np.ndarray]]:
    """``(first, last) -> (alphas, levels)`` of the shipped table (empty if unreadable)."""
    from importlib.resources import files

    try:
        data = json.loads(files("dlopt.measurement").joinpath(TABLE_FILE).read_text("utf-8"))
        return {
            (int(entry["first"]), int(entry["last"])): (
                np.asarray(entry["alphas"], dtype=float),
                np.asarray(entry["levels"], dtype=float),
            )
            for entry in data["settings"]
        }
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def _tabulated_level(alpha: float, first: int, last: int) -> float | None:
    entry = tabulated_levels().get((first, last))
    if entry is None:
        return None
    alphas, levels = entry
    index = int(np.searchsorted(alphas, alpha, side="right")) - 1
    return float(levels[index]) if index >= 0 else None


@lru_cache(maxsize=256)
def per_look_level(alpha: float, first: int, last: int) -> float:
    """Nominal one-sided level of each look, the same at every look (Pocock-type): from
    the shipped table where it holds the setting (at the tabulated alpha just below
    ``alpha``), else :func:`exact_per_look_level`."""
    if last > first:
        tabulated = _tabulated_level(alpha, first, last)
        if tabulated is not None:
            return tabulated
    return exact_per_look_level(alpha, first, last)


def exact_per_look_level(alpha: float, first: int, last: int) -> float:
    """Nominal one-sided level of each look, the same at every look (Pocock-type).

    Two calibrations, the stricter wins: the exact one for a known variance
    (``1 - Phi(pocock_constant(...))``), and a Monte Carlo one for Student-t statistics
    whose variance is re-estimated at every look with ``n - 1`` degrees of freedom
    (``_CALIBRATION_PATHS`` paths, fixed seed). Turning the first into t quantiles would
    cross in 6.1% of races for a nominal 5% over looks 3..20 (the shared variance
    estimate makes early looks err together); the second holds its level, and stays
    conservative for pooled variances with more degrees of freedom.
    """
    z_level = normal_sf(pocock_constant(alpha, first, last))
    if last == first:
        return z_level
    t_level = float(np.quantile(_min_tail_probabilities(first, last), alpha))
    return min(z_level, t_level)


def boundary(alpha: float, first: int, last: int, df: float) -> float:
    """The t-scale boundary of a look with ``df`` degrees of freedom (one-sided)."""
    level = per_look_level(alpha, first, max(last, first))
    return t_quantile(1.0 - level, max(int(df), 1))


def look_confidence(critical: float, df: float) -> float:
    """The one-sided confidence of a boundary ``critical`` at ``df`` degrees of freedom."""
    return 1.0 - t_sf(critical, max(int(df), 1))


@frozen
class PairStats:
    """Per-round paired difference ``a - b`` of two plans' scores (log cost).

    ``mean`` < 0: ``a`` is cheaper. ``se`` is the standard error of ``mean``; ``df`` its
    degrees of freedom; ``pooled`` whether the pooled variance was used.
    """

    rounds: int
    mean: float
    sd: float
    se: float
    df: float
    pooled: bool

    def interval(self, critical: float) -> tuple[float, float, float]:
        """``(mean, mean - critical*se, mean + critical*se)``."""
        half = critical * self.se
        return self.mean, self.mean - half, self.mean + half


#: Level of the F check that keeps a plan out of the pool (split over the plans).
HETEROGENEITY_LEVEL = 0.05
#: Level of the F check that sends a pair back to its own variance. Loose on purpose: at
#: a few rounds the check has little power, and a wrong fallback only costs width.
PAIR_CHECK_LEVEL = 0.25


@frozen
class PooledVariance:
    """The residual variance of a balanced rounds x plans block."""

    plans: frozenset[str]
    rounds: tuple[int, ...]
    variance: float
    df: int


def pooled_variance(scores: Mapping[str, Mapping[int, float]]) -> PooledVariance | None:
    """Two-way residual variance over the rounds every plan in ``scores`` ran.

    ``scores[plan][round]`` is a plan's score. A plan whose own share of the residuals is
    far larger than the rest's (an F check at ``HETEROGENEITY_LEVEL / P``) is left out of
    the pool, one at a time: a single noisy runtime must not widen every other pair.
    Needs at least 3 plans in the pool (with two, the pooled and per-pair variances
    coincide) and 3 common rounds.
    """
    plans = sorted(scores)
    if len(plans) < 3:
        return None
    common = sorted(set.intersection(*(set(scores[p]) for p in plans)))
    if len(common) < 3:
        return None
    while len(plans) >= 3:
        table = np.array([[scores[p][r] for r in common] for p in plans])
        resid = (
            table
            - table.mean(axis=1, keepdims=True)
            - table.mean(axis=0, keepdims=True)
            + table.mean()
        )
        df = (len(plans) - 1) * (len(common) - 1)
        variance = float((resid**2).sum() / df)
        # Each plan's residual mean square (its expectation is the plan's own variance
        # times (P-1)/P under homogeneity, hence the rescaling).
        per_plan = (resid**2).sum(axis=1) / (len(common) - 1) * len(plans) / (len(plans) - 1)
        worst = int(np.argmax(per_plan))
        others = np.delete(per_plan, worst)
        rest = float(others.mean()) if others.size else 0.0
        # A plan's residuals carry about (n-1)(P-1)/P degrees of freedom.
        dfn = max(1, round((len(common) - 1) * (len(plans) - 1) / len(plans)))
        limit = f_upper_quantile(HETEROGENEITY_LEVEL / len(plans), dfn, df)
        if rest > 0 and per_plan[worst] > limit * rest:
            del plans[worst]
            continue
        return PooledVariance(frozenset(plans), tuple(common), variance, df)
    return None


def pair_stats(
    a: Mapping[int, float], b: Mapping[int, float], pooled: PooledVariance | None = None
) -> PairStats | None:
    """Paired statistics of ``a - b`` over the rounds both ran (None under 2 rounds).

    With ``pooled`` (a block that contains both plans), the variance of a difference is
    ``2 * pooled.variance`` unless the pair's own variance exceeds it beyond the F
    check's upper ``PAIR_CHECK_LEVEL`` quantile.
    """
    common = sorted(set(a) & set(b))
    n = len(common)
    if n < 2:
        return None
    diffs = [a[r] - b[r] for r in common]
    mean = math.fsum(diffs) / n
    var = math.fsum((d - mean) ** 2 for d in diffs) / (n - 1)
    if pooled is not None and set(common) >= set(pooled.rounds) and pooled.variance > 0:
        pooled_var = 2.0 * pooled.variance
        if var <= pooled_var * f_upper_quantile(PAIR_CHECK_LEVEL, n - 1, pooled.df):
            sd = math.sqrt(pooled_var)
            return PairStats(n, mean, sd, sd / math.sqrt(n), float(pooled.df), True)
    sd = math.sqrt(var)
    return PairStats(n, mean, sd, sd / math.sqrt(n), float(n - 1), False)


@frozen
class KnownSpread:
    """The spread of a pair's per-round score difference measured before (the race that
    chose a cached plan): its standard deviation (log scale) and degrees of freedom."""

    sd: float
    df: int


#: Level of the F check that keeps a known spread out of a pair whose rounds are noisier:
#: stricter than :data:`PAIR_CHECK_LEVEL`, since a spread narrower than the rounds' only
#: makes a regression easier to catch (a pick that still clears the bar may be raced
#: again). Quieter rounds are checked at :data:`PAIR_CHECK_LEVEL`: a wide known spread
#: would hide a regression.
KNOWN_SPREAD_CHECK_LEVEL = 0.05


def with_known_spread(pair: PairStats | None, known: KnownSpread | None) -> PairStats | None:
    """``pair`` with ``known``'s variance pooled into its own (degrees of freedom added), where
    the two agree (F checks at :data:`KNOWN_SPREAD_CHECK_LEVEL` and
    :data:`PAIR_CHECK_LEVEL`). The gain is a round or more: a large effect is decided at
    the second look. Where they disagree (the machine is much busier or quieter than when
    the spread was measured), ``pair`` as it is."""
    if pair is None or known is None or known.df < 1 or not 0.0 < known.sd < math.inf:
        return pair
    own_df = max(int(pair.df), 1)
    own_var, known_var = pair.sd**2, known.sd**2
    ratio = own_var / known_var
    noisier = f_upper_quantile(KNOWN_SPREAD_CHECK_LEVEL, own_df, known.df)
    quieter = 1.0 / f_upper_quantile(PAIR_CHECK_LEVEL, known.df, own_df)
    if not quieter <= ratio <= noisier:
        return pair
    df = own_df + known.df
    sd = math.sqrt((own_df * own_var + known.df * known_var) / df)
    return PairStats(pair.rounds, pair.mean, sd, sd / math.sqrt(pair.rounds), float(df), True)


def rounds_to_reach(sd: float, margin: float, critical: float) -> float:
    """Rounds after which ``critical * sd / sqrt(n)`` falls below ``margin`` (inf if never)."""
    if margin <= 0:
        return math.inf
    if sd <= 0:
        return 0.0
    return (critical * sd / margin) ** 2


def scores_of(
    per_case: Sequence[Mapping[int, float]], weights: Sequence[float]
) -> dict[int, float]:
    """Per-round score of one plan: the log of its traffic-weighted cost,
    ``log(sum_case weight * statistic)``, over the rounds in which every case ran (a
    round with a missing or non-positive case is skipped)."""
    if not per_case:
        return {}
    rounds = set.intersection(*(set(case) for case in per_case))
    out: dict[int, float] = {}
    for r in sorted(rounds):
        values = [case[r] for case in per_case]
        if all(v > 0 for v in values):
            out[r] = math.log(math.fsum(w * v for w, v in zip(weights, values)))
    return out
