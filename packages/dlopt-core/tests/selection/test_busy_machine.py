"""A busy machine: what the report records of its load, and what the summary advises."""

from __future__ import annotations

import attrs
import pytest
import torch

import dlopt.engine.select as engine_select
import dlopt.evidence.machine_load as machine_load_module
from dlopt.evidence.report import MachineLoadEvidence
from dlopt.measurement.results import OpenComparison
from dlopt.reporting.tables import machine_line, race_notes
from dlopt.testing.fake_race import FakeRace

X = torch.randn(4, 16)


class TimedLinear(torch.nn.Module):
    """A linear layer whose eager calls take ``call_s`` on ``clock``."""

    def __init__(self, clock, call_s: float) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(16, 8)
        self.clock, self.call_s = clock, call_s

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.clock.advance(self.call_s)
        return self.layer(x)


@pytest.fixture
def machine(monkeypatch):
    """Two CPUs, a load average of 0.4, and the CPUs' worth of work other processes do
    while the test's selection runs (``machine["others"]``)."""
    state = {"others": 0.05}
    monkeypatch.setattr(machine_load_module, "usable_cpus", lambda: 2)
    monkeypatch.setattr(machine_load_module, "load_average", lambda: 0.4)
    monkeypatch.setattr(engine_select, "load_average", lambda: 0.4)
    monkeypatch.setattr(machine_load_module, "MIN_SAMPLED_S", 0.0)
    monkeypatch.setattr(machine_load_module, "others_cpus", lambda start, end: state["others"])
    return state


def select(race_slowdown: float):
    """A report of eager fp32 and ``fast``; eager's race calls take ``race_slowdown``
    times its calls before the builds (the fake eager plan adds to the model's call)."""
    race = FakeRace()
    call_s = 4e-3
    eager = race.fake("eager_fp32", call_s * (race_slowdown - 1.0))
    optimizer = race.optimizer(eager, race.fake("fast", 2e-3))
    model = TimedLinear(race.clock, call_s).eval()
    return optimizer.select_signature(model, X).report


def test_a_quiet_machine_is_recorded_and_not_called_busy(machine):
    load = select(1.0 + 1e-6).decision_time.machine_load
    assert load is not None
    assert (load.cpus, load.load_before, load.others_cpus, load.busy) == (2, 0.4, 0.05, False)
    assert load.reference_drift == pytest.approx(1.0, rel=0.05)


def test_other_processes_working_beside_the_selection_make_the_machine_busy(machine):
    machine["others"] = 1.2
    report = select(1.0 + 1e-6)
    load = report.decision_time.machine_load
    assert load.busy and load.why == "other processes used 1.2 of 2 CPUs"
    assert machine_line(report).startswith("machine: busy (other processes used 1.2 of 2 CPUs)")


def test_a_reference_slower_in_the_race_than_before_it_is_recorded_not_judged(machine):
    # An LSTM tagger's eager calls ran 2x slower in its race than when profiled on a
    # quiet machine: the drift alone does not say the machine was busy.
    load = select(2.0).decision_time.machine_load
    assert load.reference_drift == pytest.approx(2.0, rel=0.05)
    assert not load.busy and load.why == ""


def with_open_comparison(report, rounds_needed, busy: bool):
    load = MachineLoadEvidence(
        cpus=2,
        load_before=6.2,
        load_after=6.5,
        others_cpus=1.6 if busy else 0.0,
        reference_drift=1.0,
        busy=busy,
        why="other processes used 1.6 of 2 CPUs" if busy else "",
    )
    timing = attrs.evolve(report.decision_time, machine_load=load)
    budget = None if rounds_needed is None else 12.0
    open_ = OpenComparison("fast", "eager_fp32", "gate", 3, rounds_needed, budget)
    measurement = attrs.evolve(report.measurement, open_comparisons=(open_,))
    return attrs.evolve(report, decision_time=timing, measurement=measurement)


def test_a_busy_machine_is_the_advice_where_a_quiet_one_would_say_no_budget_decides_it(machine):
    report = select(1.0 + 1e-6)
    quiet = race_notes(with_open_comparison(report, None, busy=False))
    busy = race_notes(with_open_comparison(report, None, busy=True))
    assert any("no budget would decide it" in note for note in quiet)
    assert not any("no budget would decide it" in note for note in busy)
    assert any(
        "(other processes used 1.6 of 2 CPUs): rerun on a quieter machine" in n for n in busy
    )
    longer = race_notes(with_open_comparison(report, 40, busy=True))
    assert any(
        "about 40 rounds would decide it: rerun with --time-budget" in n
        and "or on a quieter machine" in n
        for n in longer
    )
    assert machine_line(with_open_comparison(report, None, busy=False)) is None
