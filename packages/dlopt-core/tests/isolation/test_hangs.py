"""Plans that hang in build, on their Nth measured call or in probe: the watchdog ends
each (the worker is killed, not left running), names it with its stage and time, and the
race finishes with the others."""

from __future__ import annotations

import faulty_plans
import pytest
from faulty_plans import select_isolated

from dlopt.events import EventKind
from dlopt.isolation.worker import PROBE_WATCHDOG_GRACE_S
from dlopt.vocabulary import Status

HANGERS = (faulty_plans.HangsInBuild, faulty_plans.HangsWhenCalled, faulty_plans.HangsInProbe)


@pytest.mark.slow
def test_every_hang_is_killed_named_and_the_decision_unchanged(plain_decision_plan):
    events: list = []
    decision, policy = select_isolated(HANGERS, 200, events)
    report = decision.report
    assert decision.selected_plan == plain_decision_plan == "fast"
    build = report.candidate("hangs_in_build").fault
    assert build is not None and (build.kind, build.stage) == ("hung", "build")
    assert build.limit_s == pytest.approx(policy.build_timeout_s, abs=0.01)
    assert build.elapsed_s is not None and build.elapsed_s >= policy.build_timeout_s
    called = report.candidate("hangs_when_called").fault
    assert called is not None and (called.kind, called.stage) == ("hung", "measure")
    # The per-call watchdog: the floor here, as the plan's own calls take microseconds.
    assert called.limit_s == pytest.approx(policy.call_timeout_floor_s, abs=0.01)
    # A hung probe is not left running: its thread cannot be stopped, so the worker is
    # killed just after the probe's own limit.
    probe = report.candidate("hangs_in_probe")
    assert probe.status is Status.REJECTED and probe.fault is not None
    assert (probe.fault.kind, probe.fault.stage) == ("hung", "probe")
    assert probe.fault.limit_s == pytest.approx(policy.probe_timeout_s + PROBE_WATCHDOG_GRACE_S)
    assert report.isolation is not None and set(report.isolation.hung) == {
        "hangs_in_build",
        "hangs_when_called",
        "hangs_in_probe",
    }
    hung = {e.candidate: e.data["stage"] for e in events if e.kind is EventKind.CANDIDATE_HUNG}
    assert hung == {
        "hangs_in_build": "build",
        "hangs_when_called": "measure",
        "hangs_in_probe": "probe",
    }
    decision.close()
