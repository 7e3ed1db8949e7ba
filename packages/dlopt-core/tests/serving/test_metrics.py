"""The production guard's metrics, scraped from a real Prometheus HTTP endpoint."""

from __future__ import annotations

import urllib.request
import warnings

import pytest
import torch

from dlopt.contract.provider import EAGER_SERVING, BuiltPlan
from dlopt.serving.evidence import RacedLatency
from dlopt.serving.served import ServedPlan
from dlopt.serving.signature import describe, signature_key
from dlopt.settings.guard import GuardPolicy
from dlopt.vocabulary import GradMode

prometheus = pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from dlopt.serving.metrics import expose  # noqa: E402

X = torch.ones(4, 3)
RACED = describe(signature_key((X,), {}))


def _scrape(registry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    server, thread = prometheus.start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        port = server.server_port
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            assert response.status == 200
            text = response.read().decode()
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def test_the_guards_counts_and_latency_are_scraped_over_http():
    calls = {"n": 0}

    def flaky(x):
        calls["n"] += 1
        if calls["n"] in (3, 4):
            raise RuntimeError("driver reset")
        return x * 2 + 1

    serve = ServedPlan(
        BuiltPlan(runner=flaky, serving=EAGER_SERVING),
        plan_name="fast",
        grad_mode=GradMode.INFERENCE_MODE,
        raced=(RACED,),
        fallback=lambda x: x * 2 + 1,
        guard=GuardPolicy(max_failures=3),
        race_latency=(RacedLatency(RACED, "b4", 1.0, 1.1),),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(6):
            serve(X)
        serve(torch.ones(2, 3))  # unseen: eager
        bad = X.clone()
        bad[0, 0] = float("nan")
        serve(bad)  # non-finite: eager
    registry = prometheus.CollectorRegistry()
    collector = expose(serve, name="demo", registry=registry)
    samples = _scrape(registry)
    ids = (("decision", "demo"), ("plan", "fast"))

    def value(name, **labels):
        return samples[(name, tuple(sorted((*ids, *labels.items()))))]

    assert value("dlopt_calls_total", route="plan") == 4
    assert value("dlopt_calls_total", route="fallback") == 4
    assert value("dlopt_calls_total", route="refused") == 0
    assert value("dlopt_fallback_calls_total", reason="plan_failure") == 2
    assert value("dlopt_fallback_calls_total", reason="unseen_signature") == 1
    assert value("dlopt_fallback_calls_total", reason="nonfinite_input") == 1
    assert value("dlopt_plan_failures_total") == 2
    assert value("dlopt_shadow_checks_total") == 0
    assert value("dlopt_plan_disabled") == 0
    assert value("dlopt_plan_latency_seconds_count") == 4
    assert value("dlopt_plan_latency_seconds_bucket", le="+Inf") == 4
    assert value("dlopt_plan_latency_seconds_bucket", le="10.0") == 4
    assert ("dlopt_latency_drift", ids) not in samples  # too few calls to tell
    registry.unregister(collector)
    assert not any(name.startswith("dlopt_") for name, _ in _scrape(registry))


def test_a_disabled_plan_shows_as_a_gauge():
    def broken(x):
        raise RuntimeError("device lost")

    serve = ServedPlan(
        BuiltPlan(runner=broken, serving=EAGER_SERVING),
        plan_name="fast",
        grad_mode=GradMode.INFERENCE_MODE,
        raced=(RACED,),
        fallback=lambda x: x,
        guard=GuardPolicy(max_failures=2),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        serve(X)
        serve(X)
    registry = prometheus.CollectorRegistry()
    expose(serve, name="demo", registry=registry)
    samples = _scrape(registry)
    assert samples[("dlopt_plan_disabled", (("decision", "demo"), ("plan", "fast")))] == 1
