"""The distributions the race reads, in plain Python: normal, Student t, F and binomial.

Every race and every cache hit's probe asks for a handful of t and F quantiles and tail
probabilities. scipy has them, but importing ``scipy.stats`` took 0.5-0.9 s and
``scipy.special`` 0.15-0.25 s of each decision on 2 cores (a third of a cache hit), so the
race computes them here: the t and F tails from the regularized incomplete beta function
(its continued fraction, to double precision), their quantiles by a safeguarded Newton
iteration on the log of the tail. tests/measurement/test_distributions.py holds them to
``scipy.stats`` across levels and degrees of freedom. The boundary's offline calibration
(:mod:`dlopt.measurement.sequential`, vectorized over many paths) still uses scipy.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache
from statistics import NormalDist

#: Relative accuracy the continued fraction and the quantile iterations stop at.
_EPSILON = 1e-15
_TINY = 1e-300
_MAX_TERMS = 10_000
_STANDARD_NORMAL = NormalDist()


def normal_sf(x: float) -> float:
    """``P(Z > x)`` for a standard normal ``Z``."""
    return 0.5 * math.erfc(x / math.sqrt(2.0))


def normal_quantile(p: float) -> float:
    """The standard normal quantile at ``p`` (``-inf``/``inf`` at 0 and 1)."""
    if p <= 0.0:
        return -math.inf
    if p >= 1.0:
        return math.inf
    return _STANDARD_NORMAL.inv_cdf(p)


def _beta_fraction(x: float, a: float, b: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz)."""
    total, plus, minus = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - total * x / plus
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, _MAX_TERMS):
        for step in (
            m * (b - m) * x / ((minus + 2 * m) * (a + 2 * m)),
            -(a + m) * (total + m) * x / ((a + 2 * m) * (plus + 2 * m)),
        ):
            d = 1.0 + step * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + step / c
            c = c if abs(c) > _TINY else _TINY
            h *= d * c
        if abs(d * c - 1.0) < _EPSILON:
            break
    return h


def beta_tails(x: float, y: float, a: float, b: float) -> tuple[float, float]:
    """``(I_x(a, b), 1 - I_x(a, b))``, the regularized incomplete beta function and its
    complement, each accurate where it is small; ``y`` is ``1 - x``, given exactly by the
    caller (computing it here would lose the digits of a small ``y``)."""
    if x <= 0.0:
        return 0.0, 1.0
    if y <= 0.0:
        return 1.0, 0.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log(y)
    )
    if x < (a + 1.0) / (a + b + 2.0):
        lower = math.exp(log_front) * _beta_fraction(x, a, b) / a
        return lower, 1.0 - lower
    upper = math.exp(log_front) * _beta_fraction(y, b, a) / b
    return 1.0 - upper, upper


def t_sf(x: float, df: float) -> float:
    """``P(T > x)`` for Student's t with ``df`` degrees of freedom."""
    if x == 0.0:
        return 0.5
    square = x * x
    # P(|T| > |x|) = I_{df / (df + x^2)}(df / 2, 1 / 2)
    both, _ = beta_tails(df / (df + square), square / (df + square), df / 2.0, 0.5)
    return 0.5 * both if x > 0 else 1.0 - 0.5 * both


def _t_log_density(x: float, df: float) -> float:
    return (
        math.lgamma((df + 1.0) / 2.0)
        - math.lgamma(df / 2.0)
        - 0.5 * math.log(df * math.pi)
        - (df + 1.0) / 2.0 * math.log1p(x * x / df)
    )


def f_sf(x: float, dfn: float, dfd: float) -> float:
    """``P(F > x)`` for the F distribution with ``dfn`` and ``dfd`` degrees of freedom."""
    if x <= 0.0:
        return 1.0
    scaled = dfn * x
    # P(F > x) = I_{dfd / (dfd + dfn x)}(dfd / 2, dfn / 2)
    upper, _ = beta_tails(dfd / (dfd + scaled), scaled / (dfd + scaled), dfd / 2.0, dfn / 2.0)
    return upper


def _f_log_density(x: float, dfn: float, dfd: float) -> float:
    half_n, half_d = dfn / 2.0, dfd / 2.0
    return (
        math.lgamma(half_n + half_d)
        - math.lgamma(half_n)
        - math.lgamma(half_d)
        + half_n * math.log(dfn / dfd)
        + (half_n - 1.0) * math.log(x)
        - (half_n + half_d) * math.log1p(dfn * x / dfd)
    )


def _upper_quantile(
    p: float, sf: Callable[[float], float], log_density: Callable[[float], float]
) -> float:
    """The ``x > 0`` with ``sf(x) = p`` for a survival function that falls from ``sf(0+) >
    p`` to 0: Newton's method on ``log sf`` in ``log x``, kept inside a bracket that
    bisection narrows whenever a step would leave it."""
    low, high = -1.0, 1.0
    while sf(math.exp(low)) < p:
        low -= 1.0
    while sf(math.exp(high)) > p:
        high += 1.0
    u = 0.5 * (low + high)
    for _ in range(200):
        x = math.exp(u)
        tail = sf(x)
        if tail > p:
            low = u
        else:
            high = u
        slope = -math.exp(log_density(x)) * x / tail if tail > 0.0 else -math.inf
        step = (math.log(tail) - math.log(p)) / slope if tail > 0.0 and slope < 0.0 else math.nan
        following = u - step
        if not low < following < high:
            following = 0.5 * (low + high)
        if abs(following - u) <= _EPSILON * max(1.0, abs(u)) or high - low <= _EPSILON:
            return math.exp(following)
        u = following
    return math.exp(u)


@lru_cache(maxsize=4096)
def t_quantile(q: float, df: int) -> float:
    """The Student-t quantile at ``q`` with ``df`` degrees of freedom (cached)."""
    if not 0.0 < q < 1.0:
        return math.copysign(math.inf, q - 0.5)
    if q == 0.5:
        return 0.0
    tail = min(q, 1.0 - q)
    x = _upper_quantile(tail, lambda v: t_sf(v, df), lambda v: _t_log_density(v, df))
    return x if q > 0.5 else -x


@lru_cache(maxsize=4096)
def f_upper_quantile(level: float, dfn: int, dfd: int) -> float:
    """The ``x`` with ``P(F > x) = level`` for F with ``dfn`` and ``dfd`` degrees of
    freedom (cached)."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"an F tail level is in (0, 1), got {level}")
    return _upper_quantile(
        level, lambda v: f_sf(v, dfn, dfd), lambda v: _f_log_density(v, dfn, dfd)
    )


def binomial_quantile(p: float, n: int, q: float) -> int:
    """The smallest ``k`` with ``P(X <= k) >= p`` for ``X ~ Binomial(n, q)``: summed down
    from ``n`` while the upper tail stays within ``1 - p`` (a quantile near ``n``, as the
    race's p99 bounds ask for, takes a few dozen terms)."""
    if n <= 0:
        return 0
    if q >= 1.0:
        return n
    if q <= 0.0:
        return 0
    allowed = 1.0 - p
    log_q, log_rest, log_n = math.log(q), math.log1p(-q), math.lgamma(n + 1.0)
    k, tail = n, 0.0
    while k > 0:
        mass = math.exp(
            log_n - math.lgamma(k + 1.0) - math.lgamma(n - k + 1.0) + k * log_q + (n - k) * log_rest
        )
        if tail + mass > allowed * (1.0 + 1e-12):
            break
        tail += mass
        k -= 1
    return k
