"""Plans that segfault, abort, ``os._exit``, raise ``SystemExit`` or crash in probe: each
is named with its stage, the race finishes with the others and serves what a race
without them serves."""

from __future__ import annotations

import faulty_plans
import pytest
from faulty_plans import bounded, isolated_policy, optimizer_with

from dlopt.events import EventKind
from dlopt.evidence.report import report_from_json
from dlopt.vocabulary import Status

CRASHERS = (
    faulty_plans.SegfaultsWhenCalled,
    faulty_plans.AbortsInBuild,
    faulty_plans.ExitsInBuild,
    faulty_plans.SystemExitInBuild,
    faulty_plans.SegfaultsInProbe,
)


@pytest.mark.slow
def test_every_crash_is_survived_named_and_the_decision_unchanged(plain_decision_plan):
    events = []
    policy = isolated_policy(*(c.name for c in CRASHERS))
    with bounded(240):
        decision = optimizer_with(*CRASHERS, policy=policy, observers=[events.append]).select(
            "faulty_plans:tiny_model"
        )
    report = report_from_json(decision.report.to_json())  # strict JSON round trip
    assert decision.selected_plan == plain_decision_plan == "fast"
    faults = {c.name: c.fault for c in report.candidates if c.fault is not None}
    assert {name: (f.kind, f.stage, f.signal, f.exit_code) for name, f in faults.items()} == {
        "segfaults_when_called": ("crashed", "measure", "SIGSEGV", None),
        "aborts_in_build": ("crashed", "build", "SIGABRT", None),
        "exits_in_build": ("crashed", "build", None, 7),
        "segfaults_in_probe": ("crashed", "probe", "SIGSEGV", None),
    }
    # The native crashes leave the Python stack faulthandler printed, down to the culprit.
    probe_stderr = faults["segfaults_in_probe"].stderr
    assert any("Segmentation fault" in line for line in probe_stderr)
    assert any("in segfault" in line for line in probe_stderr)
    # SystemExit is a Python exception the pipeline catches: that plan fails its build,
    # the worker lives on.
    quitter = report.candidate("systemexit_in_build")
    assert quitter.fault is None and quitter.status is Status.REJECTED
    assert quitter.error.stage == "build" and "the SDK gave up" in quitter.error.message
    for name in faults:
        entry = report.candidate(name)
        assert entry.status is Status.REJECTED and entry.error is not None
        assert entry.error.stage == faults[name].stage
    assert report.isolation is not None and report.isolation.workers == 5
    assert set(report.isolation.crashed) == set(faults)
    outcomes = [(a.outcome, a.plan) for a in report.isolation.attempts]
    assert outcomes[-1] == ("report", None)
    assert sorted(plan for _, plan in outcomes[:-1]) == sorted(faults)
    crashed = [e.candidate for e in events if e.kind is EventKind.CANDIDATE_CRASHED]
    assert sorted(crashed) == sorted(faults)
    # The winner was built again in this process and serves the model's outputs.
    model, workload = faulty_plans.tiny_model()
    x = workload.cases[0].args[0]
    assert decision(x).allclose(model.linear(x))
    decision.close()
