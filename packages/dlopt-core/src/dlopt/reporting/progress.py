"""Live progress of a selection, fed by its events (the ``dlopt_on_event`` hook).

:class:`ProgressState` turns the event stream into what a person wants to know: which
stage runs (probing and building plan k of n with its name, first calls and validation,
racing), for the race the round, the time budget spent and left and how many comparisons
are resolved, then the decision. :class:`ProgressDisplay` shows it: one live status line
with a budget bar on a terminal (finished plans scroll above it), or plain lines when
the stream is not a terminal (a log; round lines at most every few seconds).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import IO, Any

from dlopt.events import Event, EventKind
from dlopt.hookspecs import hookimpl

#: In plain mode a round line is printed at most this often (and whenever a comparison
#: is resolved), so a long race does not flood a log.
PLAIN_ROUND_INTERVAL_S = 5.0


def _seconds(value: float) -> str:
    return f"{value:.1f} s" if value < 100 else f"{value:.0f} s"


class ProgressState:
    """What the events so far say about a selection. Pure: no output, injectable clock."""

    def __init__(
        self, budget_s: float | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.budget_s = budget_s
        self.clock = clock
        self.plans: list[str] = []
        self.cases = 0
        self.current: str | None = None
        self.stage = "starting"
        self.finished: set[str] = set()
        self.validated: list[str] = []
        self.race_started_at: float | None = None
        self.round = 0
        self.resolved = 0
        self.elapsed_s: float | None = None  # as an event reported it
        self.race_done = False
        self.selected: str | None = None
        self.log: list[str] = []

    # -- what is happening --------------------------------------------------------
    @property
    def racing(self) -> bool:
        return self.race_started_at is not None and not self.race_done

    def position(self, name: str | None) -> str:
        """``"3/7"`` for a plan of the race, ``""`` for one not in the list."""
        if name in self.plans:
            return f"{self.plans.index(name) + 1}/{len(self.plans)}"
        return ""

    def spent_s(self) -> float:
        """Time spent in the race so far (the measurement budget counts from its start)."""
        if self.elapsed_s is not None:
            return self.elapsed_s
        if self.race_started_at is None:
            return 0.0
        return max(0.0, self.clock() - self.race_started_at)

    @property
    def comparisons(self) -> int:
        """Challengers raced against the baseline (every validated plan but the first)."""
        return max(len(self.validated) - 1, self.resolved)

    def budget_text(self) -> str:
        spent = self.spent_s()
        if not self.budget_s:
            return f"{_seconds(spent)} spent"
        left = max(0.0, self.budget_s - spent)
        return f"{_seconds(spent)} of {_seconds(self.budget_s)} ({_seconds(left)} left)"

    def race_text(self) -> str:
        return (
            f"racing: round {self.round}, {self.budget_text()}, "
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
    def _next_plan(self, after: str | None) -> None:
        """Plans are prepared in the announced order: the next one is being probed."""
        if after in self.plans:
            index = self.plans.index(after) + 1
            if index < len(self.plans):
                self.current, self.stage = self.plans[index], "probing and building"
                return
        if self.plans and len(self.finished & set(self.plans)) >= len(self.plans):
            self._start_race()

    def _start_race(self) -> None:
        if self.race_started_at is None:
            self.race_started_at = self.clock()
            self.current = None
            self.stage = "racing"

    def update(self, event: Event) -> list[str]:
        """Take ``event``; return the lines worth keeping (a log of what finished)."""
        kind, name, data = event.kind, event.candidate, event.data or {}
        where = self.position(name)
        tag = f"[{where}] {name}" if where else (name or "")
        lines: list[str] = []
        if kind is EventKind.RACE_STARTED:
            self.plans = [str(p) for p in data.get("providers") or []]
            self.finished.clear()
            if self.plans:
                self.current, self.stage = self.plans[0], "probing and building"
            budget = f"; measurement budget {_seconds(self.budget_s)}" if self.budget_s else ""
            lines.append(f"race_started: {event.message}{budget}")
        elif kind is EventKind.STAGE_STARTED:
            self.current = name or self.current
            self.stage = str(data.get("stage") or event.message).replace("_", " ")
        elif kind is EventKind.PROVIDER_UNAVAILABLE:
            lines.append(f"{tag}: unavailable: {event.message}")
            self._finish(name)
        elif kind is EventKind.CANDIDATE_BUILT:
            self.current, self.stage = name, "first calls and validation"
        elif kind is EventKind.CANDIDATE_VALIDATED:
            if name is not None and name not in self.validated:
                self.validated.append(name)
            lines.append(f"{tag}: validated ({self._costs(data)})")
            self._finish(name)
        elif kind is EventKind.CANDIDATE_REJECTED:
            lines.append(f"{tag}: rejected at {event.message}")
            if name in self.validated and self.race_started_at is None:
                self.validated.remove(name)
            if self.race_started_at is None:
                self._finish(name)
        elif kind is EventKind.ROUND_FINISHED:
            self._start_race()
            self.round = int(data.get("round") or self.round + 1)
            self.resolved = len(data.get("resolved") or [])
            elapsed = data.get("elapsed_s")
            self.elapsed_s = float(elapsed) if isinstance(elapsed, (int, float)) else None
            reported = data.get("budget_s")
            if isinstance(reported, (int, float)) and reported > 0:
                self.budget_s = float(reported)
        elif kind is EventKind.RACE_FINISHED:
            self._start_race()
            spent = f"{_seconds(self.spent_s())}" + (
                f" of the {_seconds(self.budget_s)} budget" if self.budget_s else ""
            )
            lines.append(f"race finished: {event.message}; {spent} used")
            self.race_done = True
        elif kind is EventKind.DECISION_MADE:
            self.selected = name
            lines.append(f"decision: {name}")
        else:
            lines.append(f"{kind.value}: {tag + ': ' if tag else ''}{event.message}")
        self.log.extend(lines)
        return lines

    def _finish(self, name: str | None) -> None:
        if name is not None:
            self.finished.add(name)
        self._next_plan(name)

    @staticmethod
    def _costs(data: dict[str, Any]) -> str:
        parts = []
        for key, label in (("setup_time_s", "setup"), ("first_call_time_s", "first calls")):
            value = data.get(key)
            if isinstance(value, (int, float)):
                parts.append(f"{label} {value:.3g} s")
        return ", ".join(parts) or "ok"


class ProgressDisplay:
    """Shows a selection's progress on ``stream`` (stderr by default): a live line on a
    terminal, plain lines otherwise. Register it as a plugin (it implements
    ``dlopt_on_event``) and use it as a context manager around the selection."""

    def __init__(
        self,
        stream: IO[str] | None = None,
        *,
        plain: bool = True,
        budget_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        import sys

        self.stream = stream if stream is not None else sys.stderr
        self.plain = plain
        self.state = ProgressState(budget_s, clock)
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
        now = state.clock()
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
            if ": rejected at " in line:
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
                total=state.budget_s, completed=min(state.spent_s(), state.budget_s), width=20
            )
            grid.add_row(self.spinner, bar, Text(state.status(), overflow="ellipsis", no_wrap=True))
        else:
            grid.add_row(self.spinner, Text(state.status(), overflow="ellipsis", no_wrap=True))
        return grid
