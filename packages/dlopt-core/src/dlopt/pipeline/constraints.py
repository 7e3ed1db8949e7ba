"""Deployment constraints: the limits a plan must respect, checked on typed results.

Two checks, at the two points where their numbers exist: :func:`build_violation` after a
plan is built and first-called (setup time, first call, memory), and
:func:`measured_violation` after the race (mean and p99 latency). Each returns the first
limit exceeded as a :class:`~dlopt.pipeline.state.StageError` at stage ``constraint``, or ``None``.
A limit of ``None`` is not set; a figure of ``None`` was not measured and cannot violate.
The speed gate (``min_speedup``) is the selection's: :mod:`dlopt.selection.rules`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from dlopt.measurement import CandidateMeasurement, LatencyStats, PeakMemory
from dlopt.pipeline.state import StageError
from dlopt.platform.serialization import finite_or_none
from dlopt.settings.policy import DeploymentConstraints
from dlopt.vocabulary import Objective, Stage

if TYPE_CHECKING:
    from dlopt.measurement import RaceResult
    from dlopt.pipeline.state import CandidateState, SelectionContext

#: ``(what, figure, limit, limit's name, unit)``.
Check = tuple[str, float | None, float | None, str, str]


def build_violation(
    limits: DeploymentConstraints,
    *,
    setup_s: float | None,
    first_calls_s: Sequence[float],
    memory: PeakMemory | None,
    device_memory_mb: float | None,
) -> StageError | None:
    """The first one-off cost over its limit; ``max_first_call_time_s`` is per case and
    ``max_peak_memory_mb`` holds every memory figure a plan has (process or CUDA
    allocator peak, CUDA device-wide growth, the plan runtime's own figure)."""
    memory_limit = (limits.max_peak_memory_mb, "max_peak_memory_mb", " MB")
    return first_violation(
        ("setup time", setup_s, limits.max_setup_time_s, "max_setup_time_s", "s"),
        (
            "first call",
            max(first_calls_s, default=None),
            limits.max_first_call_time_s,
            "max_first_call_time_s",
            "s",
        ),
        ("peak memory", memory.mb if memory else None, *memory_limit),
        (
            "device-wide memory growth",
            memory.device_wide_mb if memory else None,
            *memory_limit,
        ),
        ("device memory (as the plan's runtime reports it)", device_memory_mb, *memory_limit),
    )


def measured_violation(
    limits: DeploymentConstraints, measured: CandidateMeasurement, weights: Sequence[float]
) -> StageError | None:
    """The first steady-state latency over its limit (traffic-weighted over the cases)."""
    return first_violation(
        ("mean latency", measured.weighted_mean_ms, limits.max_latency_ms, "max_latency_ms", " ms"),
        (
            "p99 latency",
            weighted_latency(measured, weights, lambda stats: stats.p99_ms),
            limits.max_p99_latency_ms,
            "max_p99_latency_ms",
            " ms",
        ),
    )


def weighted_latency(
    measured: CandidateMeasurement | None,
    weights: Sequence[float],
    statistic: Callable[[LatencyStats], float | None],
) -> float | None:
    """Traffic-weighted average of a per-case statistic (``None`` if any case lacks it)."""
    if measured is None or not measured.cases:
        return None
    total = 0.0
    for weight, stats in zip(weights, measured.cases):
        value = statistic(stats)
        if value is None:
            return None
        total += weight * value
    return finite_or_none(total)


def first_violation(*checks: Check) -> StageError | None:
    """The first check whose figure exceeds its limit, as a ``constraint`` rejection."""
    for what, value, limit, limit_name, unit in checks:
        if limit is not None and value is not None and value > limit:
            return StageError(
                Stage.CONSTRAINT, f"{what} {value:.3f}{unit} > {limit_name} {limit:g}{unit}"
            )
    return None


def apply_measured_constraints(
    candidates: list[CandidateState], result: RaceResult, run: SelectionContext
) -> None:
    """Reject challengers whose steady-state latency breaks a deployment limit.

    Under the throughput objective the latency limits are a budget per call at each
    batch size, which the selection checks (:mod:`dlopt.selection.throughput`)."""
    if run.policy.objective is Objective.MAX_THROUGHPUT:
        return
    for cand in candidates:
        if not cand.alive or cand.is_reference:
            continue
        error = measured_violation(
            run.policy.constraints, result.candidate(cand.name), result.weights
        )
        if error is not None:
            run.reject(cand, error)
