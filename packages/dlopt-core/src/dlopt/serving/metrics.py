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

from collections.abc import Callable, Iterator, Mapping, Sequence
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


Labelled = Sequence[tuple[Mapping[str, str], "HealthRecord"]]


class RecordsCollector:
    """A Prometheus collector of health records, each with its own labels (``decision``;
    ``dlopt serve`` adds ``replica``) beside ``plan``; ``records`` is read at each scrape."""

    def __init__(self, records: Callable[[], Labelled]) -> None:
        self._core = _prometheus()
        self.records = records

    def describe(self) -> list[Any]:
        """Nothing to describe up front: registering must not run a collection."""
        return []

    def collect(self) -> Iterator[Any]:
        core = self._core
        found = list(self.records())
        if not found:
            return
        names = [*found[0][0], "plan"]

        def family(kind: str, name: str, text: str, extra: tuple[str, ...] = ()) -> Any:
            maker = {"counter": core.CounterMetricFamily, "gauge": core.GaugeMetricFamily}
            return maker[kind](name, text, labels=[*names, *extra])

        calls = family("counter", "dlopt_calls", "Calls of the decision by route.", ("route",))
        fallbacks = family(
            "counter", "dlopt_fallback_calls", "Calls served by eager fp32, by reason.", ("reason",)
        )
        counters = {
            "failures": family("counter", "dlopt_plan_failures", "Calls on which the plan raised."),
            "shadow_checks": family("counter", "dlopt_shadow_checks", "Shadow checks compared."),
            "shadow_mismatches": family(
                "counter", "dlopt_shadow_mismatches", "Shadow checks out of the plan's limits."
            ),
            "shadow_skipped": family(
                "counter", "dlopt_shadow_skipped", "Shadow checks skipped: the queue was full."
            ),
        }
        disabled = family("gauge", "dlopt_plan_disabled", "1 once the plan is disabled.")
        drift = family(
            "gauge",
            "dlopt_latency_drift",
            "1 when the served median drifted above the race's upper bound.",
        )
        histogram = core.HistogramMetricFamily(
            "dlopt_plan_latency_seconds",
            "Time of each plan call (with its synchronisation).",
            labels=names,
        )
        for labels, health in found:
            base = [*labels.values(), health.plan]
            calls.add_metric([*base, Route.PLAN.value], health.plan_calls)
            calls.add_metric([*base, Route.FALLBACK.value], health.fallback_calls)
            calls.add_metric([*base, Route.REFUSED.value], health.refused_calls)
            for reason in FallbackReason:
                fallbacks.add_metric([*base, reason.value], health.fallbacks.get(reason.value, 0))
            for field, counter in counters.items():
                counter.add_metric(base, getattr(health, field))
            disabled.add_metric(base, 0 if health.disabled is None else 1)
            if health.drift is not None:
                drift.add_metric(base, 1 if health.drift else 0)
            latency = health.plan_latency
            if latency is not None:
                buckets = [(repr(float(b)), n) for b, n in zip(latency.bounds_s, latency.counts)]
                buckets.append(("+Inf", latency.count))
                histogram.add_metric(base, buckets, sum_value=latency.sum_s)
        yield calls
        yield fallbacks
        yield from counters.values()
        yield disabled
        if drift.samples:
            yield drift
        yield histogram


class DecisionCollector(RecordsCollector):
    """A Prometheus collector of one decision's health (see the module docstring)."""

    def __init__(self, decision: Served, name: str) -> None:
        super().__init__(lambda: [({"decision": name}, decision.health())])
        self.decision = decision
        self.name = name


def expose(decision: Served, *, name: str = "default", registry: Any = None) -> DecisionCollector:
    """Register ``decision``'s metrics under ``name`` with ``registry`` (default:
    prometheus-client's global registry); returns the collector, which
    ``registry.unregister(collector)`` removes. Raises ``ImportError`` naming the extra
    when prometheus-client is not installed."""
    core = _prometheus()
    collector = DecisionCollector(decision, name)
    (registry if registry is not None else core.REGISTRY).register(collector)
    return collector
