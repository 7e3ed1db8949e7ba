"""The progress display, driven by a fake event stream and a fake clock."""

from __future__ import annotations

import io

from dlopt.events import Event, EventKind
from dlopt.reporting.progress import PLAIN_ROUND_INTERVAL_S, ProgressDisplay, ProgressState


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _stream() -> list[Event]:
    """A selection of four plans: one unavailable, one rejected at build, two raced."""
    return [
        Event(
            EventKind.RACE_STARTED,
            "4 providers, 2 cases",
            data={"providers": ["eager_fp32", "nosdk", "broken", "fast"]},
        ),
        Event(EventKind.CANDIDATE_BUILT, "built", candidate="eager_fp32"),
        Event(
            EventKind.CANDIDATE_VALIDATED,
            "ok",
            candidate="eager_fp32",
            data={"setup_time_s": 0.0, "first_call_time_s": 0.002},
        ),
        Event(EventKind.PROVIDER_UNAVAILABLE, "fake SDK missing", candidate="nosdk"),
        Event(EventKind.CANDIDATE_REJECTED, "build: RuntimeError: no", candidate="broken"),
        Event(EventKind.CANDIDATE_BUILT, "built", candidate="fast"),
        Event(EventKind.CANDIDATE_VALIDATED, "ok", candidate="fast"),
    ]


def test_stages_name_the_plan_and_its_place():
    state = ProgressState(budget_s=20.0, clock=Clock())
    events = _stream()
    state.update(events[0])
    assert state.status() == "plan 1/4: eager_fp32: probing and building"
    state.update(events[1])
    assert state.status() == "plan 1/4: eager_fp32: first calls and validation"
    state.update(events[2])
    assert state.status() == "plan 2/4: nosdk: probing and building"
    state.update(
        Event(EventKind.STAGE_STARTED, "probe", candidate="nosdk", data={"stage": "probe"})
    )
    assert state.status() == "plan 2/4: nosdk: probe"
    lines = state.update(events[3]) + state.update(events[4])
    assert lines == [
        "[2/4] nosdk: unavailable: fake SDK missing",
        "[3/4] broken: rejected at build: RuntimeError: no",
    ]
    assert state.status() == "plan 4/4: fast: probing and building"


def test_the_race_shows_round_budget_and_resolved_comparisons():
    clock = Clock()
    state = ProgressState(budget_s=20.0, clock=clock)
    for event in _stream():
        state.update(event)
    assert state.racing  # every plan prepared: the race (and its budget) has begun
    clock.now += 4.0
    state.update(Event(EventKind.ROUND_FINISHED, "round 3", data={"round": 3, "resolved": []}))
    assert state.status() == (
        "racing: round 3, 4.0 s of 20.0 s (16.0 s left), 0 of 1 comparisons resolved"
    )
    clock.now += 2.0
    state.update(
        Event(EventKind.ROUND_FINISHED, "round 4", data={"round": 4, "resolved": ["fast"]})
    )
    assert "round 4, 6.0 s of 20.0 s (14.0 s left), 1 of 1" in state.status()
    state.update(Event(EventKind.RACE_FINISHED, "4 rounds, stop: resolved"))
    state.update(Event(EventKind.DECISION_MADE, "Selected fast", candidate="fast"))
    assert state.status() == "decided: fast"
    assert state.log[-2:] == [
        "race finished: 4 rounds, stop: resolved; 6.0 s of the 20.0 s budget used",
        "decision: fast",
    ]


def test_elapsed_time_reported_by_the_event_wins_over_the_clock():
    state = ProgressState(budget_s=10.0, clock=Clock())
    state.update(
        Event(
            EventKind.ROUND_FINISHED,
            "round 1",
            data={"round": 1, "resolved": [], "elapsed_s": 7.5, "budget_s": 30.0},
        )
    )
    assert "7.5 s of 30.0 s (22.5 s left)" in state.status()


def test_plain_mode_prints_a_log_with_rounds_throttled():
    clock = Clock()
    out = io.StringIO()
    display = ProgressDisplay(out, plain=True, budget_s=20.0, clock=clock)
    with display:
        for event in _stream():
            display.dlopt_on_event(event)
        for round_number in range(1, 11):
            clock.now += 1.0
            display.dlopt_on_event(
                Event(
                    EventKind.ROUND_FINISHED,
                    f"round {round_number}",
                    data={"round": round_number, "resolved": ["fast"] if round_number >= 4 else []},
                )
            )
        display.dlopt_on_event(Event(EventKind.DECISION_MADE, "kept", candidate="eager_fp32"))
    lines = out.getvalue().splitlines()
    assert lines[0] == "race_started: 4 providers, 2 cases; measurement budget 20.0 s"
    assert "[3/4] broken: rejected at build: RuntimeError: no" in lines
    rounds = [line for line in lines if "racing: round" in line]
    # The first round, each change in resolved comparisons, and every few seconds.
    assert [r.split(",")[0].strip() for r in rounds] == [
        "racing: round 1",
        "racing: round 4",
        "racing: round 9",
    ]
    assert PLAIN_ROUND_INTERVAL_S == 5.0
    assert lines[-1] == "decision: eager_fp32"
    assert "\x1b[" not in out.getvalue()


def test_terminal_mode_keeps_finished_plans_above_the_live_line():
    out = io.StringIO()
    display = ProgressDisplay(out, plain=False, budget_s=20.0, clock=Clock())
    with display:
        for event in _stream():
            display.dlopt_on_event(event)
    text = out.getvalue()
    assert "[2/4] nosdk: unavailable: fake SDK missing" in text
    assert "[3/4] broken: rejected at build" in text
