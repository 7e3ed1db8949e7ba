"""The progress display, driven by a fake event stream and a fake clock."""

from __future__ import annotations

import argparse
import io
from typing import Any

from dlopt.cli.cmd_select import add_select_command
from dlopt.events import Event, EventKind
from dlopt.reporting.progress import PLAIN_ROUND_INTERVAL_S, ProgressDisplay, ProgressState
from dlopt.settings.measurement import MeasurementPolicy


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _stage(name: str, stage: str) -> Event:
    return Event(EventKind.STAGE_STARTED, stage, candidate=name, data={"stage": stage})


def _stream() -> list[Event]:
    """A selection of four plans: one unavailable, one rejected at build, two raced."""
    return [
        Event(
            EventKind.RACE_STARTED,
            "4 providers, 2 cases",
            data={"providers": ["eager_fp32", "nosdk", "broken", "fast"]},
        ),
        _stage("eager_fp32", "probe"),
        _stage("eager_fp32", "build"),
        Event(EventKind.CANDIDATE_BUILT, "built", candidate="eager_fp32"),
        _stage("eager_fp32", "first_call"),
        _stage("eager_fp32", "validation"),
        Event(
            EventKind.CANDIDATE_VALIDATED,
            "ok",
            candidate="eager_fp32",
            data={"setup_time_s": 0.0, "first_call_time_s": 0.002},
        ),
        _stage("nosdk", "probe"),
        Event(EventKind.PROVIDER_UNAVAILABLE, "fake SDK missing", candidate="nosdk"),
        _stage("broken", "probe"),
        _stage("broken", "build"),
        Event(EventKind.CANDIDATE_REJECTED, "build: RuntimeError: no", candidate="broken"),
        _stage("fast", "probe"),
        _stage("fast", "build"),
        Event(EventKind.CANDIDATE_BUILT, "built", candidate="fast"),
        _stage("fast", "first_call"),
        _stage("fast", "validation"),
        Event(EventKind.CANDIDATE_VALIDATED, "ok", candidate="fast"),
    ]


def _round(number: int, elapsed_s: float, budget_s: Any, leader: Any, resolved: list[str]) -> Event:
    return Event(
        EventKind.ROUND_FINISHED,
        f"round {number}",
        data={
            "round": number,
            "elapsed_s": elapsed_s,
            "budget_s": budget_s,
            "leader": leader,
            "resolved": resolved,
        },
    )


def test_each_plans_stage_events_say_what_runs():
    state = ProgressState()
    seen = []
    for event in _stream():
        state.update(event)
        seen.append(state.status())
    assert seen[0] == "starting"  # the race is announced; no plan has started yet
    assert seen[1:5] == [
        "plan 1/4: eager_fp32: probing",
        "plan 1/4: eager_fp32: building",
        "plan 1/4: eager_fp32: building",  # built: its first calls are next
        "plan 1/4: eager_fp32: first calls",
    ]
    assert seen[5] == "plan 1/4: eager_fp32: validating"
    assert "plan 2/4: nosdk: probing" in seen
    assert "plan 3/4: broken: building" in seen
    assert "plan 4/4: fast: validating" in seen
    assert state.log[2:4] == [
        "[2/4] nosdk: unavailable: fake SDK missing",
        "[3/4] broken: rejected at build: RuntimeError: no",
    ]


def test_after_the_last_plan_the_race_warms_up_with_no_budget_guessed():
    state = ProgressState()
    for event in _stream():
        state.update(event)
    assert state.racing
    assert state.status() == "racing: warming up 2 plans"


def test_the_race_shows_the_events_round_leader_budget_and_comparisons():
    state = ProgressState()
    for event in _stream():
        state.update(event)
    state.update(_round(3, 4.0, 20.0, "fast", []))
    assert state.status() == (
        "racing: round 3, leader fast, 4.0 s of 20.0 s (16.0 s left), 0 of 1 comparisons resolved"
    )
    # The budget is the race's own (scaled to the model): a later round may report another.
    state.update(_round(4, 6.0, 45.0, "eager_fp32", ["fast"]))
    assert state.status() == (
        "racing: round 4, leader eager_fp32, 6.0 s of 45.0 s (39.0 s left), "
        "1 of 1 comparisons resolved"
    )
    state.update(Event(EventKind.RACE_FINISHED, "4 rounds, stop: resolved"))
    state.update(Event(EventKind.DECISION_MADE, "Selected fast", candidate="fast"))
    assert state.status() == "decided: fast"
    assert state.log[-2:] == [
        "race finished: 4 rounds, stop: resolved; 6.0 s of the 45.0 s budget used",
        "decision: fast",
    ]


def test_a_round_without_a_leader_or_a_finite_budget_shows_what_is_known():
    state = ProgressState()
    state.update(_round(1, 1.5, float("inf"), None, []))
    assert state.status() == "racing: round 1, 1.5 s spent, 0 of 0 comparisons resolved"


def test_a_race_stopped_before_its_first_round_reports_no_time():
    state = ProgressState()
    for event in _stream():
        state.update(event)
    state.update(Event(EventKind.RACE_FINISHED, "0 rounds, stop: cancelled"))
    assert state.log[-1] == "race finished: 0 rounds, stop: cancelled"


def test_plain_mode_prints_a_log_with_rounds_throttled():
    clock = Clock()
    out = io.StringIO()
    display = ProgressDisplay(out, plain=True, clock=clock)
    with display:
        for event in _stream():
            display.dlopt_on_event(event)
        for number in range(1, 11):
            clock.now += 1.0
            display.dlopt_on_event(
                _round(number, float(number), 20.0, "fast", ["fast"] if number >= 4 else [])
            )
        display.dlopt_on_event(Event(EventKind.DECISION_MADE, "kept", candidate="eager_fp32"))
    lines = out.getvalue().splitlines()
    assert lines[0] == "race_started: 4 providers, 2 cases"
    assert "[3/4] broken: rejected at build: RuntimeError: no" in lines
    rounds = [line for line in lines if "racing: round" in line]
    # The first round, each change in resolved comparisons, and every few seconds.
    assert [r.split(",")[0].strip() for r in rounds] == [
        "racing: round 1",
        "racing: round 4",
        "racing: round 9",
    ]
    assert "leader fast, 9.0 s of 20.0 s (11.0 s left)" in rounds[-1]
    assert PLAIN_ROUND_INTERVAL_S == 5.0
    assert lines[-1] == "decision: eager_fp32"
    assert "\x1b[" not in out.getvalue()


def test_terminal_mode_keeps_finished_plans_above_the_live_line():
    out = io.StringIO()
    display = ProgressDisplay(out, plain=False, clock=Clock())
    with display:
        for event in _stream():
            display.dlopt_on_event(event)
        display.dlopt_on_event(_round(1, 2.0, 20.0, "fast", []))
    text = out.getvalue()
    assert "[2/4] nosdk: unavailable: fake SDK missing" in text
    assert "[3/4] broken: rejected at build" in text


def test_the_clis_measurement_budget_defaults_to_the_auto_budget():
    parser = argparse.ArgumentParser()
    commands = parser.add_subparsers(dest="command")
    add_select_command(commands)
    assert parser.parse_args(["select", "--demo"]).max_measure_time is None
    policy = MeasurementPolicy()
    assert policy.max_time_s is None
    text = " ".join(commands.choices["select"].format_help().split())
    assert "scaled to the model" in text
    assert f"{policy.auto_budget_min_s:g} to {policy.auto_budget_max_s:g} s" in text


def test_a_plan_that_crashed_or_hung_an_isolated_worker_is_shown_and_the_race_restarts():
    state = ProgressState()
    state.update(Event(EventKind.RACE_STARTED, "3 providers", data={"providers": ["e", "a", "b"]}))
    state.update(Event(EventKind.ROUND_FINISHED, "round 1", data={"round": 1}))
    assert state.racing
    lines = state.update(
        Event(
            EventKind.CANDIDATE_CRASHED,
            "crashed at measure (SIGSEGV)",
            candidate="a",
            data={"stage": "measure", "signal": "SIGSEGV"},
        )
    )
    assert lines == ["[2/3] a: crashed at measure (SIGSEGV); resuming without it"]
    assert not state.racing and state.status() == "resuming without a"
    lines = state.update(
        Event(EventKind.CANDIDATE_HUNG, "hung at build (4.0 s, limit 4 s)", candidate="b")
    )
    assert lines == ["[3/3] b: hung at build (4.0 s, limit 4 s); resuming without it"]


def test_an_isolated_selection_says_its_decision_once():
    """The worker decides, then the host brings the winner back, checks it and decides
    again: one ``decision:`` line, and the check says what it is."""
    state = ProgressState()
    lines = [line for event in _stream() for line in state.update(event)]
    race_end = Event(EventKind.RACE_FINISHED, "3 rounds, stop: decided")
    decided = Event(EventKind.DECISION_MADE, "faster", candidate="fast")
    again = Event(
        EventKind.CANDIDATE_VALIDATED, "ok", candidate="fast", data={"setup_time_s": 0.33}
    )
    for event in (race_end, decided, _stage("fast", "build"), again, decided):
        lines += state.update(event)
    assert [line for line in lines if line.startswith("decision:")] == ["decision: fast"]
    assert lines[-1] == "[4/4] fast: brought back into this process and checked (setup 0.33 s)"
    assert state.status() == "decided: fast"


def test_a_selection_from_python_shows_the_clis_progress_lines(monkeypatch):
    """``InferenceOptimizer(observers=[ProgressDisplay()])`` prints what ``dlopt select``
    prints while it selects: each plan as it finishes, the race and the decision."""
    import torch

    from dlopt.settings.workload import WorkloadCase, WorkloadProfile
    from dlopt.testing.fake_race import FakeRace
    from dlopt.testing.models import StructuredMLP

    monkeypatch.delenv("NO_COLOR", raising=False)
    race = FakeRace(seed=11)
    optimizer = race.optimizer(race.fake("eager_fp32", 2e-3), race.fake("fast", 1e-3))
    out = io.StringIO()  # not a terminal: plain lines, decided from the stream
    display = ProgressDisplay(out)
    assert display.plain
    workload = WorkloadProfile(cases=(WorkloadCase("b1", args=(torch.randn(1, 16),)),))
    with display:
        decision = optimizer.with_policy(optimizer.policy, observers=[display]).select(
            StructuredMLP().eval(), workload
        )
    decision.close()
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("race_started: ")
    assert any(line.startswith("[2/2] fast: validated") for line in lines), lines
    assert any(line.startswith("race finished: ") for line in lines), lines
    assert lines.count(f"decision: {decision.report.selected_plan}") == 1


def test_on_a_terminal_the_display_is_live_unless_colour_is_off(monkeypatch):
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert not ProgressDisplay(Tty()).plain
    monkeypatch.setenv("NO_COLOR", "1")
    assert ProgressDisplay(Tty()).plain
