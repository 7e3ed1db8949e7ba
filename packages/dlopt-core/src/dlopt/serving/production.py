"""``ProductionGuard``: the counters, the failure rule, the shadow sampling and the latency
watch of one served decision (docs/serving.md, "In production").

:class:`~dlopt.serving.served.ServedPlan` routes each call and tells the guard what
happened; the guard keeps the record (:meth:`ProductionGuard.health`) and decides when
the plan is disabled. Everything a call touches here is a few additions under one lock;
the shadow checks run in their own thread (:mod:`dlopt.serving.shadow`).
"""

from __future__ import annotations

import random
import threading
import warnings
from collections.abc import Sequence

from dlopt.serving.evidence import RacedLatency
from dlopt.serving.health import (
    DRIFT_FACTOR,
    DRIFT_MIN_CALLS,
    HealthRecord,
    LatencyBuckets,
    ShadowMismatch,
    SignatureHealth,
)
from dlopt.serving.latency import EXPORTED_BUCKETS_S, LatencyHistogram, RecentLatency
from dlopt.settings.guard import GuardPolicy
from dlopt.vocabulary import FallbackReason, PlanFailure

#: Shadow mismatches kept whole in the health record.
MISMATCHES_KEPT = 5


class SignatureWatch:
    """The latency watch of one raced signature: the race's figures and the recent calls."""

    __slots__ = ("raced", "recent")

    def __init__(self, raced: RacedLatency) -> None:
        self.raced = raced
        self.recent = RecentLatency()


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e3


class ProductionGuard:
    """What one decision's guard knows (see the module docstring).

    ``plan_name``: for messages. ``policy``: the guard's settings. ``race_latency``: the
    race's latency per raced signature (the watch's yardstick; empty for a decision whose
    report has none). ``race_p50_ms``: the race's traffic-weighted median, for the record.
    """

    def __init__(
        self,
        plan_name: str,
        policy: GuardPolicy,
        race_latency: Sequence[RacedLatency] = (),
        race_p50_ms: float | None = None,
    ) -> None:
        self.plan_name = plan_name
        self.policy = policy
        self.race_p50_ms = race_p50_ms
        self._lock = threading.Lock()
        self._calls = 0
        self._plan_calls = 0
        self._refused = 0
        self._fallbacks = dict.fromkeys(FallbackReason, 0)
        self._failures = 0
        self._consecutive = 0
        self._last_failure: str | None = None
        self._shadow_checks = 0
        self._shadow_mismatches = 0
        self._shadow_skipped = 0
        self._shadow_errors = 0
        self._mismatches: list[ShadowMismatch] = []
        self._disabled: str | None = None
        self._warned: set[str] = set()
        #: Every plan call since the start (exported), and the recent ones (the record).
        self._served = LatencyHistogram()
        self._recent = RecentLatency()
        self._watches: dict[str, SignatureWatch] = {}
        for raced in race_latency:
            self._watches.setdefault(raced.signature, SignatureWatch(raced))
        self._random = random.Random()

    # -- per call -----------------------------------------------------------------------
    @property
    def disabled(self) -> str | None:
        """Why the plan no longer serves (``None`` while it does)."""
        return self._disabled

    def watch_of(self, signature: str) -> SignatureWatch | None:
        """The latency watch of a raced signature's text (``None``: not raced, or no race
        latency recorded): handed back to :meth:`plan_served` with each of its calls."""
        return self._watches.get(signature)

    def plan_served(self, seconds: float, watch: SignatureWatch | None, requests: int = 1) -> None:
        """The plan served a call in ``seconds`` (``watch``: from :meth:`watch_of`);
        ``requests``: the callers' requests it carried (a merged call carries several)."""
        with self._lock:
            self._calls += requests
            self._plan_calls += requests
            self._consecutive = 0
            self._served.record(seconds)
            self._recent.record(seconds)
            if watch is not None:
                watch.recent.record(seconds)

    def fallback(self, reason: FallbackReason, requests: int = 1) -> None:
        """Eager fp32 served a call (carrying ``requests`` requests), for ``reason``."""
        with self._lock:
            self._calls += requests
            self._fallbacks[reason] += requests

    def refused(self) -> None:
        """A call raised as the policy says (it reached neither the plan nor eager)."""
        with self._lock:
            self._calls += 1
            self._refused += 1

    def plan_failed(self, exc: BaseException, *, can_disable: bool = True) -> bool:
        """The plan raised ``exc`` on a call eager fp32 then served (or that the caller
        gets: under ``on_plan_failure="raise"``, or with no eager model to fall back to,
        when ``can_disable`` is ``False``). Returns whether this failure disabled the plan."""
        text = f"{type(exc).__name__}: {exc}"[:500]
        with self._lock:
            self._failures += 1
            self._consecutive += 1
            self._last_failure = text
            if (
                can_disable
                and self.policy.on_plan_failure is PlanFailure.FALLBACK
                and self._disabled is None
                and self._consecutive >= self.policy.max_failures
            ):
                self._disabled = (
                    f"{self._consecutive} consecutive failures (max_failures "
                    f"{self.policy.max_failures}); the last: {text}"
                )
                return True
        return False

    def sample_shadow(self) -> bool:
        """Whether this plan call is also checked by eager fp32 (``shadow_rate``)."""
        rate = self.policy.shadow_rate
        return rate > 0 and self._disabled is None and self._random.random() < rate

    # -- shadow checks (from the shadow thread) ---------------------------------------
    def shadow_skipped(self) -> None:
        with self._lock:
            self._shadow_skipped += 1

    def shadow_error(self) -> None:
        with self._lock:
            self._shadow_errors += 1

    def shadow_checked(self, signature: str, reason: str | None, call: int) -> bool:
        """A shadow check ended: ``reason`` is ``None`` when the plan's output passed,
        else why it failed. Returns whether this mismatch disabled the plan."""
        with self._lock:
            self._shadow_checks += 1
            if reason is None:
                return False
            self._shadow_mismatches += 1
            if len(self._mismatches) < MISMATCHES_KEPT:
                self._mismatches.append(ShadowMismatch(signature, reason, call))
            if self._disabled is None and self._shadow_mismatches >= self.policy.max_mismatches:
                self._disabled = (
                    f"{self._shadow_mismatches} shadow checks out of limits (max_mismatches "
                    f"{self.policy.max_mismatches}); the first: {self._mismatches[0].reason}"
                )
                return True
        return False

    @property
    def plan_calls(self) -> int:
        """Calls the plan served so far."""
        return self._plan_calls

    @property
    def fallback_calls(self) -> int:
        """Calls eager fp32 served so far, for any reason."""
        with self._lock:
            return sum(self._fallbacks.values())

    # -- warnings -----------------------------------------------------------------------
    def warn_once(self, key: str, message: str, stacklevel: int) -> None:
        """``warnings.warn(message)`` the first time ``key`` is seen."""
        with self._lock:
            if key in self._warned:
                return
            self._warned.add(key)
        warnings.warn(message, RuntimeWarning, stacklevel=stacklevel + 1)

    # -- the record ---------------------------------------------------------------------
    def health(self) -> HealthRecord:
        """The record so far (see :class:`~dlopt.serving.health.HealthRecord`)."""
        with self._lock:
            signatures = tuple(self._signature_health(w) for w in self._watches.values())
            drifted = [s for s in signatures if s.drift]
            compared = [s for s in signatures if s.drift is not None]
            drift: bool | None = bool(drifted) if compared else None
            note = None
            if drifted:
                note = "; ".join(
                    f"{s.case}: served median {s.served_p50_ms:.3g} ms over {s.plan_calls} "
                    f"calls, race upper bound {s.race_high_ms:.3g} ms"
                    for s in drifted
                )
            elif not self._watches:
                note = "the report records no race latency per signature to compare with"
            elif not compared:
                note = f"fewer than {DRIFT_MIN_CALLS} plan calls on any raced signature so far"
            return HealthRecord(
                plan=self.plan_name,
                calls=self._calls,
                plan_calls=self._plan_calls,
                fallback_calls=sum(self._fallbacks.values()),
                refused_calls=self._refused,
                failures=self._failures,
                consecutive_failures=self._consecutive,
                shadow_checks=self._shadow_checks,
                shadow_mismatches=self._shadow_mismatches,
                shadow_skipped=self._shadow_skipped,
                shadow_errors=self._shadow_errors,
                disabled=self._disabled,
                served_p50_ms=_ms(self._recent.quantile(0.5)),
                served_p99_ms=_ms(self._recent.quantile(0.99)),
                drift=drift,
                fallbacks={reason.value: n for reason, n in self._fallbacks.items()},
                last_failure=self._last_failure,
                mismatches=tuple(self._mismatches),
                race_p50_ms=self.race_p50_ms,
                signatures=signatures,
                drift_note=note,
                shadow_rate=self.policy.shadow_rate,
                plan_latency=LatencyBuckets(
                    EXPORTED_BUCKETS_S,
                    tuple(self._served.cumulative()),
                    self._served.count,
                    self._served.total_s,
                ),
            )

    @staticmethod
    def _signature_health(watch: SignatureWatch) -> SignatureHealth:
        recent, raced = watch.recent, watch.raced
        p50 = _ms(recent.quantile(0.5))
        drift = None
        if recent.count >= DRIFT_MIN_CALLS and p50 is not None:
            drift = p50 > DRIFT_FACTOR * raced.high_ms
        return SignatureHealth(
            signature=raced.signature,
            case=raced.case,
            plan_calls=recent.count,
            served_p50_ms=p50,
            served_p99_ms=_ms(recent.quantile(0.99)),
            race_median_ms=raced.median_ms,
            race_high_ms=raced.high_ms,
            drift=drift,
        )
