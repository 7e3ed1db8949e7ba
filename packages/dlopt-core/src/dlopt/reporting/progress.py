"""Live progress of a selection, fed by its events (the ``dlopt_on_event`` hook).

:class:`ProgressState` turns the event stream into what a person wants to know: which
plan (k of n, by name) is being probed, built, first-called or validated (each plan's
``STAGE_STARTED`` events), then the race: its round, leader, the time spent and left of
its budget and how many comparisons are resolved (each ``ROUND_FINISHED`` event carries
them; the budget is the race's own, scaled to the model unless the policy fixed it),
then the decision. :class:`ProgressDisplay` shows it: one live status line with a budget
bar on a terminal (finished plans scroll above it), or plain lines when the stream is not
a terminal (a log; round lines at most every few seconds).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import IO, Any

from dlopt.contract.hooks import hookimpl
from dlopt.events import Event, EventKind
from dlopt.platform.config_checks import is_number
from dlopt.vocabulary import Stage

#: In plain mode a round line is printed at most this often (and whenever a comparison
#: is resolved), so a long race does not flood a log.
PLAIN_ROUND_INTERVAL_S = 5.0

#: What each stage of a plan's preparation (``STAGE_STARTED`` data ``"stage"``) reads as.
STAGE_LABELS = {
    Stage.PROBE.value: "probing",
    Stage.BUILD.value: "building",
    Stage.FIRST_CALL.value: "first calls",
    Stage.VALIDATION.value: "validating",
}


def _seconds(value: float) -> str:
    return f"{value:.1f} s" if value < 100 else f"{value:.0f} s"


def _number(value: Any) -> float | None:
    """A finite number an event reported, else ``None``."""
    return float(value) if is_number(value) else None


class ProgressState:
    """What the events so far say about a selection. Pure: no output, no clock."""

    def __init__(self) -> None:
        self.plans: list[str] = []
        self.current: str | None = None
        self.stage = "starting"
        self.finished: set[str] = set()
        self.validated: list[str] = []
        self.race_started = False
        self.round = 0
        self.resolved = 0
        self.leader: str | None = None
        #: The race's time so far and its budget, as the last round reported them.
        self.elapsed_s: float | None = None
        self.budget_s: float | None = None
        self.race_done = False
        self.selected: str | None = None
        self.log: list[str] = []

    # -- what is happening --------------------------------------------------------
    @property
    def racing(self) -> bool:
        return self.race_started and not self.race_done

    def position(self, name: str | None) -> str:
        """``"3/7"`` for a plan of the race, ``""`` for one not in the list."""
        if name in self.plans:
            return f"{self.plans.index(name) + 1}/{len(self.plans)}"
        return ""

    @property
    def comparisons(self) -> int:
        """Challengers raced against the baseline (every validated plan but the first)."""
        return max(len(self.validated) - 1, self.resolved)

    def budget_text(self) -> str:
        """``"4.0 s of 20.0 s (16.0 s left)"``, or ``"4.0 s spent"`` with no budget known."""
        spent = self.elapsed_s or 0.0
        if not self.budget_s:
            return f"{_seconds(spent)} spent"
        left = max(0.0, self.budget_s - spent)
        return f"{_seconds(spent)} of {_seconds(self.budget_s)} ({_seconds(left)} left)"

    def race_text(self) -> str:
        if not self.round:
            plans = len(self.validated)
            return f"racing: warming up {plans} plan{'s' if plans != 1 else ''}"
        leader = f"leader {self.leader}, " if self.leader else ""
        return (
            f"racing: round {self.round}, {leader}{self.budget_text()}, "
            f"{self.resolved} of {self.comparisons} comparisons resolved"
        )

    def status(self) -> str:
        """The one line that says what runs now."""
        if self.selected is not None:
            return f"decided: {self.selected}"
        if self.race_done:
            return "checking the survivors again and deciding"
        if self.racing:
            return self.race_text()
        if self.current is not None:
            where = self.position(self.current)
            return f"plan {where}: {self.current}: {self.stage}" if where else self.stage
        return self.stage

    # -- events -------------------------------------------------------------------
    def update(self, event: Event) -> list[str]:
        """Take ``event``; return the lines worth keeping (a log of what finished)."""
        kind, name, data = event.kind, event.candidate, event.data or {}
        where = self.position(name)
        tag = f"[{where}] {name}" if where else (name or "")
        lines: list[str] = []
        if kind is EventKind.RACE_STARTED:
            self.plans = [str(p) for p in data.get("providers") or []]
            self.finished.clear()
            lines.append(f"race_started: {event.message}")
        elif kind is EventKind.STAGE_STARTED:
            self.current = name or self.current
            stage = str(data.get("stage") or event.message)
            self.stage = STAGE_LABELS.get(stage, stage.replace("_", " "))
        elif kind is EventKind.PROVIDER_UNAVAILABLE:
            lines.append(f"{tag}: unavailable: {event.message}")
            self._finish(name)
        elif kind is EventKind.CANDIDATE_SKIPPED:
            lines.append(f"{tag}: {event.message}")
            self._finish(name)
        elif kind is EventKind.CANDIDATE_VALIDATED and self.selected is not None:
            # The decided plan again: an isolated selection's host brings the winner back
            # into its own process and checks it before serving it.
            lines.append(f"{tag}: brought back into this process and checked ({self._costs(data)})")
        elif kind is EventKind.CANDIDATE_VALIDATED:
            if name is not None and name not in self.validated:
                self.validated.append(name)
            lines.append(f"{tag}: validated ({self._costs(data)})")
            self._finish(name)
        elif kind is EventKind.CANDIDATE_REJECTED:
            lines.append(f"{tag}: rejected at {event.message}")
            if name in self.validated and not self.race_started:
                self.validated.remove(name)
            if not self.race_started:
                self._finish(name)
        elif kind in (EventKind.CANDIDATE_CRASHED, EventKind.CANDIDATE_HUNG):
            # An isolated worker died with this plan: a new one starts without it and
            # prepares and races the others again.
            lines.append(f"{tag}: {event.message}; resuming without it")
            self.current = None
            self.stage = f"resuming without {name}"
            self.race_started = self.race_done = False
        elif kind is EventKind.ROUND_FINISHED:
            self.race_started = True
            self.round = int(data.get("round") or self.round + 1)
            self.resolved = len(data.get("resolved") or [])
            leader = data.get("leader")
            self.leader = str(leader) if leader else None
            self.elapsed_s = _number(data.get("elapsed_s"))
            budget = _number(data.get("budget_s"))
            self.budget_s = budget if budget and budget > 0 else None
        elif kind is EventKind.RACE_FINISHED:
            self.race_started = True
            lines.append(f"race finished: {event.message}{self._spent()}")
            self.race_done = True
        elif kind is EventKind.DECISION_MADE:
            if name != self.selected:  # the host's decision repeats the worker's: said once
                lines.append(f"decision: {name}")
            self.selected = name
        elif kind is not EventKind.CANDIDATE_BUILT:  # its stages say more
            lines.append(f"{kind.value}: {tag + ': ' if tag else ''}{event.message}")
        self.log.extend(lines)
        return lines

    def _spent(self) -> str:
        if self.elapsed_s is None:
            return ""  # no round ran: no time was reported
        budget = f" of the {_seconds(self.budget_s)} budget" if self.budget_s else ""
        return f"; {_seconds(self.elapsed_s)}{budget} used"

    def _finish(self, name: str | None) -> None:
        """Plans are prepared in the announced order: once every one is done, the race
        warms up (its first round's event comes after the warm-up)."""
        if name is not None:
            self.finished.add(name)
        if self.plans and self.finished >= set(self.plans):
            self.race_started = True
            self.current = None

    @staticmethod
    def _costs(data: dict[str, Any]) -> str:
        parts = []
        for key, label in (("setup_time_s", "setup"), ("first_call_time_s", "first calls")):
            value = data.get(key)
            if isinstance(value, (int, float)):
                parts.append(f"{label} {value:.3g} s")
        return ", ".join(parts) or "ok"


def _on_a_terminal(stream: IO[str]) -> bool:
    """Whether ``stream`` is a terminal that takes a live line (not with ``NO_COLOR`` set
    or ``TERM=dumb``): the rule of ``dlopt.cli.console.wants_plain``, which this layer
    cannot import (the CLI sits above it, and its console imports nothing of dlopt)."""
    import os

    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    try:
        return bool(stream.isatty())
    except (AttributeError, OSError, ValueError):
        return False


class ProgressDisplay:
    """Shows a selection's progress on ``stream`` (stderr by default), the lines
    ``dlopt select`` shows: a live line on a terminal, plain lines otherwise (``plain``:
    ``None`` decides from ``stream``). It is an observer: from Python pass it to the
    optimizer and use it as a context manager around the selection::

        with ProgressDisplay() as progress:
            decision = InferenceOptimizer(observers=[progress]).select(model, workload)

    It also implements ``dlopt_on_event``, to be registered as a plugin."""

    def __init__(
        self,
        stream: IO[str] | None = None,
        *,
        plain: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        import sys

        self.stream = stream if stream is not None else sys.stderr
        self.plain = plain if plain is not None else not _on_a_terminal(self.stream)
        #: Paces the plain mode's round lines; the race's own times come from its events.
        self.clock = clock
        self.state = ProgressState()
        self._last_round_line: float | None = None
        self._last_resolved = 0
        self._live: Any = None

    # -- lifecycle ------------------------------------------------------------------
    def __enter__(self) -> ProgressDisplay:
        if not self.plain:
            from rich.console import Console
            from rich.live import Live

            console = Console(file=self.stream, highlight=False, emoji=False)
            self._live = Live(
                _StatusLine(self.state),
                console=console,
                transient=True,
                refresh_per_second=4,
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the live line (idempotent)."""
        if self._live is not None:
            self._live.stop()
            self._live = None

    # -- the hook ------------------------------------------------------------------
    def __call__(self, event: Event) -> None:
        """An observer of ``InferenceOptimizer(observers=[...])``: as :meth:`dlopt_on_event`."""
        self.dlopt_on_event(event)

    @hookimpl
    def dlopt_on_event(self, event: Event) -> None:
        """Take one event: update the status, print what finished."""
        lines = self.state.update(event)
        if event.kind is EventKind.ROUND_FINISHED and self.plain:
            lines = self._round_line()
        for line in lines:
            self._print(line)
        if self._live is not None:
            self._live.refresh()

    def _round_line(self) -> list[str]:
        state = self.state
        now = self.clock()
        due = (
            self._last_round_line is None
            or now - self._last_round_line >= PLAIN_ROUND_INTERVAL_S
            or state.resolved != self._last_resolved
        )
        if not due:
            return []
        self._last_round_line, self._last_resolved = now, state.resolved
        return [f"  {state.race_text()}"]

    def _print(self, line: str) -> None:
        if self._live is not None:
            style = "dim" if "unavailable" in line else None
            if any(f": {word} at " in line for word in ("rejected", "crashed", "hung")):
                style = "red"
            self._live.console.print(line, style=style, markup=False, highlight=False)
        else:
            print(line, file=self.stream, flush=True)


class _StatusLine:
    """The live line: a spinner, what runs now and, during the race, the budget bar."""

    def __init__(self, state: ProgressState) -> None:
        from rich.spinner import Spinner

        self.state = state
        self.spinner = Spinner("dots", style="cyan")

    def __rich__(self) -> Any:
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        from rich.text import Text

        state = self.state
        grid = Table.grid(padding=(0, 1))
        if state.racing and state.budget_s:
            bar = ProgressBar(
                total=state.budget_s,
                completed=min(state.elapsed_s or 0.0, state.budget_s),
                width=20,
            )
            grid.add_row(self.spinner, bar, Text(state.status(), overflow="ellipsis", no_wrap=True))
        else:
            grid.add_row(self.spinner, Text(state.status(), overflow="ellipsis", no_wrap=True))
        return grid
