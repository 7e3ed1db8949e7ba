"""Fault class: one call that takes longer than the whole measurement budget.

The report names the plan and its longest call, and the selection reason says a call
overran the budget instead of advising a bigger budget.
"""

from __future__ import annotations

from dlopt.testing.models import StructuredMLP as SmallNet


def test_a_call_longer_than_the_budget_is_named_in_the_report(race, x):
    def hangs_once(call: int) -> float:
        return 30.0 if call == 4 else 1e-3

    slow = race.fake("hangs", 1e-3)
    slow.latency_s = hangs_once
    decision = race.optimizer(race.fake("eager_fp32", 2e-3), slow, max_time_s=1.5).select_signature(
        SmallNet(), x
    )

    report = decision.report
    assert report.measurement.longest_call_plan == "hangs"
    assert report.measurement.longest_call_s >= 30.0
    assert report.candidate("hangs").longest_call_s >= 30.0
    reason = report.selection_reason
    assert "hangs" in reason and "30.0 s" in reason and "overran" in reason
    assert "raise MeasurementPolicy.max_time_s" not in reason
