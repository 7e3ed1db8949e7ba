"""Pair any two candidates of a finished race, not only a challenger and the baseline.

The selection needs this when a ``native`` variant has replaced ``eager_fp32`` as the
baseline: challengers are then judged against that variant on the rounds both ran.
"""

from __future__ import annotations

import math

from dlopt.measurement.kernel import RaceResult
from dlopt.measurement.stats import RatioInterval, alpha_for_look, ratio_from_log, t_interval


def paired_speedup(result: RaceResult, candidate: str, reference: str) -> RatioInterval:
    """Speedup of ``candidate`` over ``reference`` (> 1: candidate faster) from the race.

    Uses the per-round paired log-ratio of their traffic-weighted burst costs over the
    rounds both ran, with the same error budget as the race's decision intervals: the
    per-challenger alpha share at the race's final look, so the interval is as
    conservative as the one that resolved each challenger against the baseline.
    """
    cand = result.candidate(candidate)
    ref = result.candidate(reference)
    diffs = [
        math.log(r / c)
        for c, r in zip(cand.round_costs_ms, ref.round_costs_ms)
        if c is not None and r is not None and c > 0 and r > 0
    ]
    policy = result.policy
    challengers = max(len(result.candidates) - 1, 1)
    alpha = policy.alpha / (challengers if policy.family_wise else 1)
    look = max(result.rounds - policy.min_rounds + 1, 1)
    alpha_look = alpha_for_look(alpha, look, policy.max_looks)
    return ratio_from_log(
        t_interval(diffs, alpha_look),
        confidence=policy.confidence,
        method=(
            f"paired t-interval of per-round log cost ratios vs {reference!r} over "
            f"{len(diffs)} common rounds, at the race's final-look alpha share"
        ),
        rounds=len(diffs),
        per_look_confidence=1.0 - alpha_look,
    )
