"""The production guard's record as Prometheus metrics (``pip install "dlopt-core[metrics]"``).

::

    from prometheus_client import start_http_server
    from dlopt.serving.metrics import expose

    expose(decision, name="resnet50")   # into prometheus_client's default registry
    start_http_server(9100)             # GET :9100/metrics

The metrics are read from :meth:`~dlopt.engine.decision.OptimizationDecision.health` when
Prometheus scrapes, never on a served call (a custom collector), so exporting costs the
calls nothing. Every metric carries the labels ``decision`` (the name given) and
``plan`` (the selected plan):

| metric | type | what |
| --- | --- | --- |
| ``dlopt_calls_total{route}`` | counter | calls by route: ``plan``, ``fallback`` (eager fp32), ``refused`` (raised) |
| ``dlopt_fallback_calls_total{reason}`` | counter | eager fp32 calls by reason (``unseen_signature``, ``nonfinite_input``, ``plan_failure``, ``plan_disabled``) |
| ``dlopt_plan_failures_total`` | counter | calls on which the plan raised |
| ``dlopt_shadow_checks_total`` | counter | shadow checks compared |
| ``dlopt_shadow_mismatches_total`` | counter | shadow checks out of the plan's limits |
| ``dlopt_shadow_skipped_total`` | counter | shadow checks skipped (the queue was full) |
| ``dlopt_plan_disabled`` | gauge | 1 once the plan is disabled |
| ``dlopt_latency_drift`` | gauge | 1 when served latency drifted above the race's, 0 when not, absent before it can tell |
| ``dlopt_plan_latency_seconds`` | histogram | every plan call's time since the decision started serving |
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

from dlopt.vocabulary import FallbackReason, Route

if TYPE_CHECKING:
    from dlopt.serving.health import HealthRecord

#: The install command named when prometheus-client is missing.
INSTALL_HINT = 'pip install "dlopt-core[metrics]"'


class Served(Protocol):
    """What the collector reads: an ``OptimizationDecision`` (or its ``ServedPlan``)."""

    def health(self) -> HealthRecord: ...


def _prometheus() -> Any:
    try:
        import prometheus_client.core as core
    except ImportError:
        raise ImportError(f"Prometheus metrics need prometheus-client: {INSTALL_HINT}") from None
    return core


class DecisionCollector:
    """A Prometheus collector of one decision's health (see the module docstring)."""

    def __init__(self, decision: Served, name: str) -> None:
        self._core = _prometheus()
        self.decision = decision
        self.name = name

    def describe(self) -> list[Any]:
        """Nothing to describe up front: registering must not run a collection."""
        return []

    def collect(self) -> Iterator[Any]:
        core = self._core
        health = self.decision.health()
        base = [self.name, health.plan]
        labels = ["decision", "plan"]

        calls = core.CounterMetricFamily(
            "dlopt_calls", "Calls of the decision by route.", labels=[*labels, "route"]
        )
        calls.add_metric([*base, Route.PLAN.value], health.plan_calls)
        calls.add_metric([*base, Route.FALLBACK.value], health.fallback_calls)
        calls.add_metric([*base, Route.REFUSED.value], health.refused_calls)
        yield calls

        fallbacks = core.CounterMetricFamily(
            "dlopt_fallback_calls",
            "Calls served by eager fp32, by reason.",
            labels=[*labels, "reason"],
        )
        for reason in FallbackReason:
            fallbacks.add_metric([*base, reason.value], health.fallbacks.get(reason.value, 0))
        yield fallbacks

        for metric, value, text in (
            ("dlopt_plan_failures", health.failures, "Calls on which the plan raised."),
            ("dlopt_shadow_checks", health.shadow_checks, "Shadow checks compared."),
            (
                "dlopt_shadow_mismatches",
                health.shadow_mismatches,
                "Shadow checks out of the plan's limits.",
            ),
            (
                "dlopt_shadow_skipped",
                health.shadow_skipped,
                "Shadow checks skipped: the queue was full.",
            ),
        ):
            counter = core.CounterMetricFamily(metric, text, labels=labels)
            counter.add_metric(base, value)
            yield counter

        disabled = core.GaugeMetricFamily(
            "dlopt_plan_disabled", "1 once the plan is disabled.", labels=labels
        )
        disabled.add_metric(base, 0 if health.disabled is None else 1)
        yield disabled
        if health.drift is not None:
            drift = core.GaugeMetricFamily(
                "dlopt_latency_drift",
                "1 when the served median drifted above the race's upper bound.",
                labels=labels,
            )
            drift.add_metric(base, 1 if health.drift else 0)
            yield drift

        latency = health.plan_latency
        if latency is not None:
            histogram = core.HistogramMetricFamily(
                "dlopt_plan_latency_seconds",
                "Time of each plan call (with its synchronisation).",
                labels=labels,
            )
            buckets = [(repr(float(b)), n) for b, n in zip(latency.bounds_s, latency.counts)]
            buckets.append(("+Inf", latency.count))
            histogram.add_metric(base, buckets, sum_value=latency.sum_s)
            yield histogram


def expose(decision: Served, *, name: str = "default", registry: Any = None) -> DecisionCollector:
    """Register ``decision``'s metrics under ``name`` with ``registry`` (default:
    prometheus-client's global registry); returns the collector, which
    ``registry.unregister(collector)`` removes. Raises ``ImportError`` naming the extra
    when prometheus-client is not installed."""
    core = _prometheus()
    collector = DecisionCollector(decision, name)
    (registry if registry is not None else core.REGISTRY).register(collector)
    return collector
