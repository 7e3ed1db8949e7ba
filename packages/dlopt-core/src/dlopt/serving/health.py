"""``HealthRecord``: what happened to a decision's calls in production (``decision.health()``).

One record, read at any time from any thread: how many calls each route took, the plan's
failures and whether it is disabled (and why), the shadow checks and their mismatches,
and the served latency against the race's (the latency watch). docs/serving.md ("In
production") says how to read it; :mod:`dlopt.serving.metrics` exports the same numbers
to Prometheus.
"""

from __future__ import annotations

from typing import Any

from attrs import frozen

from dlopt.platform.serialization import dumps, to_jsonable

#: Plan calls of one raced signature before its served median is compared with the race.
DRIFT_MIN_CALLS = 200
#: How far above the race's upper bound a served median must be to count as drift.
DRIFT_FACTOR = 1.2


@frozen
class ShadowMismatch:
    """A shadow check whose plan output missed the plan's validation limits against eager
    fp32 on the same inputs: the call's ``signature``, the validation's ``reason`` (which
    output, which metric, which limit) and which plan call it was (1-based)."""

    signature: str
    reason: str
    call: int


@frozen
class SignatureHealth:
    """Served latency on one raced signature beside the race's: ``plan_calls``, the recent
    plan calls the figures cover (the last 1000 to 2000), their median and p99, the race's
    median and upper bound for it, and ``drift`` (``None`` until :data:`DRIFT_MIN_CALLS`
    calls)."""

    signature: str
    case: str
    plan_calls: int
    served_p50_ms: float | None
    served_p99_ms: float | None
    race_median_ms: float
    race_high_ms: float
    drift: bool | None


@frozen
class LatencyBuckets:
    """Every plan call since the decision started serving, as a cumulative histogram:
    ``counts[i]`` calls took at most ``bounds_s[i]`` seconds; ``count`` calls took
    ``sum_s`` seconds together (what Prometheus reads)."""

    bounds_s: tuple[float, ...]
    counts: tuple[int, ...]
    count: int
    sum_s: float


@frozen
class HealthRecord:
    """A decision's production record (see the module docstring).

    Counts: ``calls`` (every call of the decision), ``plan_calls`` (served by the plan),
    ``fallback_calls`` (served by eager fp32, for any reason; ``fallbacks`` splits them:
    ``unseen_signature``, ``nonfinite_input``, ``plan_failure``, ``plan_disabled``),
    ``refused_calls`` (raised as the policy says: an unseen signature or non-finite input
    under ``"raise"``). ``failures``: calls on which the plan raised;
    ``consecutive_failures`` and ``last_failure`` (type and message). ``disabled``:
    ``None`` while the plan serves, else why it stopped.

    Shadow checks: ``shadow_checks`` compared, ``shadow_mismatches`` failed the plan's
    limits (the first few in ``mismatches``), ``shadow_skipped`` not made because the
    background queue was full, ``shadow_errors`` where eager itself failed on the copy.

    Latency: ``served_p50_ms``/``served_p99_ms`` over the recent plan calls (the last
    1000 to 2000; the plan call and its synchronisation, not routing or waiting for
    another thread), ``race_p50_ms`` the race's traffic-weighted median,
    ``signatures`` the watch per raced signature, and ``drift``: ``True`` when a raced
    signature's served median is more than :data:`DRIFT_FACTOR` times the race's upper
    bound over at least :data:`DRIFT_MIN_CALLS` calls, ``False`` when one was compared and
    none drifted, ``None`` before any could be; ``drift_note`` says which and by how much.
    ``plan_latency``: every plan call since the start, as a cumulative histogram.
    """

    plan: str
    calls: int
    plan_calls: int
    fallback_calls: int
    refused_calls: int
    failures: int
    consecutive_failures: int
    shadow_checks: int
    shadow_mismatches: int
    shadow_skipped: int
    shadow_errors: int
    disabled: str | None
    served_p50_ms: float | None
    served_p99_ms: float | None
    drift: bool | None
    fallbacks: dict[str, int]
    last_failure: str | None = None
    mismatches: tuple[ShadowMismatch, ...] = ()
    race_p50_ms: float | None = None
    signatures: tuple[SignatureHealth, ...] = ()
    drift_note: str | None = None
    shadow_rate: float = 0.0
    plan_latency: LatencyBuckets | None = None

    def to_jsonable(self) -> dict[str, Any]:
        """The record as strict JSON values."""
        value = to_jsonable(self)
        assert isinstance(value, dict)
        return value

    def to_json(self) -> str:
        """The record as strict JSON text."""
        return dumps(self.to_jsonable())
