"""Cancelling a selection from the host, and the progress events a display is fed."""

from __future__ import annotations

import pytest

from dlopt.errors import SelectionCancelled
from dlopt.events import EventKind
from dlopt.settings.workload import WorkloadProfile
from dlopt.testing.models import StructuredMLP as SmallNet


def test_cancelled_before_the_race_raises_and_releases_every_plan(race, x) -> None:
    fast = race.fake("fast", 1e-3)
    eager = race.fake("eager_fp32", 2e-3)
    asked = []

    def should_continue() -> bool:
        asked.append(True)
        return len(asked) < 2  # the reference is built, then the host cancels

    optimizer = race.optimizer(eager, fast)
    with pytest.raises(SelectionCancelled, match="cancelled before 'fast'"):
        optimizer.select(SmallNet(), WorkloadProfile.single(x), should_continue=should_continue)
    assert fast.builds == 0
    assert eager.builds == eager.closes == 1


def test_cancelled_during_the_race_decides_on_the_rounds_run(race, x) -> None:
    # A plan exactly on the 1.02x bar: nothing would stop the race before the host does.
    rounds = []
    optimizer = race.optimizer(
        race.fake("eager_fp32", 2e-3), race.fake("same", 2e-3 / 1.02), futility_confidence=None
    )
    optimizer.observers = (
        lambda e: rounds.append(e) if e.kind is EventKind.ROUND_FINISHED else None,
    )
    decision = optimizer.select(
        SmallNet(), WorkloadProfile.single(x), should_continue=lambda: len(rounds) < 4
    )
    measurement = decision.report.measurement
    assert measurement is not None and measurement.rounds == 4
    assert measurement.stop_reason == "cancelled"
    assert [c.kind for c in measurement.open_comparisons] == ["gate"]
    assert decision.selected_plan == "eager_fp32"


def test_a_huge_effect_cut_off_after_one_round_is_advised_the_least_rounds(race, x) -> None:
    # 100x faster after one round: no spread yet, but not "no budget would decide it".
    from dlopt.reporting.tables import race_notes

    rounds = []
    optimizer = race.optimizer(race.fake("eager_fp32", 0.2), race.fake("fast", 0.002))
    optimizer.observers = (
        lambda e: rounds.append(e) if e.kind is EventKind.ROUND_FINISHED else None,
    )
    decision = optimizer.select(
        SmallNet(), WorkloadProfile.single(x), should_continue=lambda: len(rounds) < 1
    )
    measurement = decision.report.measurement
    assert measurement.rounds == 1
    (open_,) = measurement.open_comparisons
    policy = measurement.policy
    assert open_.rounds == 1 and open_.rounds_needed == max(policy.min_rounds, 2)
    assert open_.budget_s_needed is not None and open_.budget_s_needed > 0
    notes = race_notes(decision.report)
    assert any(
        f"about {open_.rounds_needed} rounds would decide it: rerun with --time-budget" in note
        for note in notes
    )
    assert not any("no budget would decide it" in note for note in notes)


def test_every_plan_reports_its_stages_and_rounds_their_budget(race, x) -> None:
    events = []
    optimizer = race.optimizer(race.fake("eager_fp32", 2e-3), race.fake("fast", 1e-3))
    optimizer.observers = (events.append,)
    optimizer.select_signature(SmallNet(), x)
    stages = [(e.candidate, e.data["stage"]) for e in events if e.kind is EventKind.STAGE_STARTED]
    for name in ("eager_fp32", "fast"):
        assert [s for n, s in stages if n == name] == [
            "probe",
            "build",
            "first_call",
            "validation",
        ]
    rounds = [e.data for e in events if e.kind is EventKind.ROUND_FINISHED]
    assert rounds and all(r["budget_s"] > 0 and r["elapsed_s"] <= r["budget_s"] for r in rounds)
    assert [r["round"] for r in rounds] == list(range(1, len(rounds) + 1))
