"""The optimize tool takes an objective and a latency budget: max_throughput races
one registered request at several batch sizes, the summary carries the served batch size
and the throughput curves, and what cannot be batched is a structured error."""

from __future__ import annotations

import torch

from dlopt.agents.schemas import OPTIMIZE, READ_REPORT
from dlopt.testing.models import StructuredMLP

from .test_toolkit import checked, error_code


def _one_request(toolkit) -> None:
    one = torch.randn(1, 16, generator=torch.Generator().manual_seed(4))
    toolkit.register_workload("one", StructuredMLP(), one, description="one request")


def test_max_throughput_with_a_budget_serves_a_plan_and_a_batch_size(make_toolkit) -> None:
    toolkit, _, providers = make_toolkit()
    _one_request(toolkit)
    # The fakes take the same time at every batch size: "fast" (1 ms per call) meets a
    # 1.5 ms budget at every size and serves the most items at the largest; eager (2 ms)
    # meets it at none.
    result = toolkit.invoke(
        OPTIMIZE,
        {
            "workload": "one",
            "objective": "max_throughput",
            "max_latency_ms": 1.5,
            "batch_sizes": [4, 1, 2],
        },
    )
    summary = checked(result)["result"]
    assert summary["objective"] == "max_throughput"
    assert (summary["selected_plan"], summary["batch_size"]) == ("fast", 4)
    curves = summary["throughput"]
    assert curves["budget"] == "max_latency_ms 1.5 ms" and curves["budget_met"] is True
    points = {(p["plan"], p["batch_size"]): p for p in curves["curves"]}
    assert set(points) == {(plan, b) for plan in ("eager_fp32", "fast") for b in (1, 2, 4)}
    assert all(points["fast", b]["admissible"] for b in (1, 2, 4))
    assert not any(points["eager_fp32", b]["admissible"] for b in (1, 2, 4))
    assert "max_latency_ms" in points["eager_fp32", 1]["budget_note"]
    report = toolkit.report("one")
    assert report.constraints.max_latency_ms == 1.5 and report.batch_size == 4
    # The read tool shows the same summary; the decision the host takes serves batch 4.
    assert checked(toolkit.invoke(READ_REPORT, {"workload": "one"}))["result"]["batch_size"] == 4
    decision = toolkit.take_decision("one")
    assert decision is not None and decision.batch_size == 4
    decision.close()
    assert providers["fast"].builds == 1


def test_min_latency_and_a_p99_budget_reach_the_policy(make_toolkit) -> None:
    toolkit, _, _ = make_toolkit()
    _one_request(toolkit)
    summary = checked(
        toolkit.invoke(
            OPTIMIZE,
            {"workload": "one", "objective": "min_latency", "max_p99_latency_ms": 50},
        )
    )["result"]
    assert summary["objective"] == "min_latency" and summary["selected_plan"] == "fast"
    assert "batch_size" not in summary and "throughput" not in summary
    assert toolkit.report("one").constraints.max_p99_latency_ms == 50


def test_what_cannot_be_batched_is_a_structured_error(make_toolkit) -> None:
    toolkit, _, providers = make_toolkit()
    # "w" is registered at batch 4: not one request.
    result = toolkit.invoke(OPTIMIZE, {"workload": "w", "objective": "max_throughput"})
    assert error_code(result) == "invalid_arguments"
    assert "size 4 along batch_dim 0" in result["error"]["message"]
    _one_request(toolkit)
    result = toolkit.invoke(OPTIMIZE, {"workload": "one", "batch_sizes": [1, 2]})
    assert error_code(result) == "invalid_arguments"
    assert "max_throughput" in result["error"]["message"]
    for bad in ({"batch_sizes": [0]}, {"batch_sizes": []}, {"max_latency_ms": -1}):
        assert error_code(toolkit.invoke(OPTIMIZE, {"workload": "one", **bad})) == (
            "invalid_arguments"
        )
    assert providers["fast"].builds == 0
