"""Progress events emitted during a race, delivered through the ``dlopt_on_event`` hook."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from attrs import field, frozen

from dlopt.vocabulary import TextEnum


class EventKind(TextEnum):
    RACE_STARTED = "race_started"
    #: A plan enters a stage (``data["stage"]``: a :class:`~dlopt.vocabulary.Stage` value:
    #: probe, build, first_call, validation).
    STAGE_STARTED = "stage_started"
    PROVIDER_UNAVAILABLE = "provider_unavailable"
    CANDIDATE_BUILT = "candidate_built"
    CANDIDATE_VALIDATED = "candidate_validated"
    CANDIDATE_REJECTED = "candidate_rejected"
    #: A plan is not built: its prior cannot beat the confirmed leader, or the time
    #: budget has no room for it (the message says which, with the numbers).
    CANDIDATE_SKIPPED = "candidate_skipped"
    #: Isolated mode: a plan's provider crashed or hung the worker (``data["stage"]``,
    #: ``data["signal"]`` or ``data["elapsed_s"]``); the selection resumes without it.
    CANDIDATE_CRASHED = "candidate_crashed"
    CANDIDATE_HUNG = "candidate_hung"
    ROUND_FINISHED = "round_finished"
    RACE_FINISHED = "race_finished"
    DECISION_MADE = "decision_made"


@frozen
class Event:
    """One progress event. ``candidate`` is set for per-candidate events; ``data`` holds
    JSON-able details (stage, error, round number, timings)."""

    kind: EventKind
    message: str
    candidate: str | None = None
    data: dict[str, Any] = field(factory=dict)


def fan_out(*sinks: Callable[[Event], None]) -> Callable[[Event], None]:
    """One event sink that hands each event to every sink in ``sinks`` (the plugins'
    ``dlopt_on_event`` hooks, the caller's observers); an observer that raises is skipped
    for that event and never stops the selection."""

    def emit(event: Event) -> None:
        for sink in sinks:
            with contextlib.suppress(Exception):
                sink(event)

    return emit
