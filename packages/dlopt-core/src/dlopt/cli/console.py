"""The one table printer of the command line: rich on a terminal, plain text otherwise.

On a terminal, tables fit its width (reasons wrap at spaces, install hints fold anywhere,
names and numbers never break) and rows are coloured by what happened to the plan. When
stdout is not a terminal, ``--plain`` is given, ``NO_COLOR`` is set or ``TERM=dumb``,
the same tables are plain text whose long cells are kept whole (greppable logs).

This module imports nothing from dlopt: it renders any object shaped like
:class:`dlopt.reporting.tables.Table`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from typing import IO, Any, Protocol

#: The rule under the last column is at most this wide (long reasons and hints).
_LAST_RULE_WIDTH = 40

#: Row emphasis on a terminal, by the row style a table declares.
ROW_STYLES = {"selected": "bold green", "failed": "red", "unavailable": "dim", "lost": None}


class TableLike(Protocol):
    """What :func:`Output.table` renders (:class:`dlopt.reporting.tables.Table`)."""

    @property
    def headers(self) -> tuple[str, ...]: ...
    @property
    def rows(self) -> tuple[tuple[str, ...], ...]: ...
    @property
    def overflow(self) -> tuple[str, ...]: ...
    @property
    def numeric(self) -> tuple[bool, ...]: ...
    @property
    def row_styles(self) -> tuple[str | None, ...]: ...
    @property
    def title(self) -> str | None: ...
    @property
    def priority(self) -> tuple[int, ...]: ...


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain-text table; ``None`` shows as ``-``; long cells are kept whole.

    Columns are left-aligned and padded to their widest cell, except the last (reasons,
    hints), which is not padded so long text does not widen the rest.
    """
    cells = [[("-" if value is None else str(value)) for value in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for index, value in enumerate(row):
            widths[index] = max(widths[index], len(value))

    def line(values: Sequence[str]) -> str:
        padded = [v.ljust(widths[i]) for i, v in enumerate(values[:-1])]
        return "  ".join([*padded, values[-1]]).rstrip()

    rule = "  ".join("-" * w for w in widths[:-1]) + "  " + "-" * min(widths[-1], _LAST_RULE_WIDTH)
    return "\n".join([line(list(headers)), rule, *(line(row) for row in cells)])


def wants_plain(
    stream: IO[str], plain: bool = False, environ: Mapping[str, str] | None = None
) -> bool:
    """Plain text when asked (``--plain``), when ``NO_COLOR`` is set or ``TERM=dumb``, or
    when ``stream`` is not a terminal (a pipe, a file, a test's capture)."""
    env = os.environ if environ is None else environ
    if plain or env.get("NO_COLOR") or env.get("TERM") == "dumb":
        return True
    isatty = getattr(stream, "isatty", None)
    try:
        return not (callable(isatty) and isatty())
    except (OSError, ValueError):
        return True


class Output:
    """Where a command writes: one stream, plain or rich (see :func:`wants_plain`)."""

    def __init__(
        self, stream: IO[str] | None = None, *, plain: bool | None = None, width: int | None = None
    ) -> None:
        self.stream = stream if stream is not None else sys.stdout
        self.plain = wants_plain(self.stream) if plain is None else plain
        self._console: Any = None
        if not self.plain:
            from rich.console import Console

            self._console = Console(
                file=self.stream, width=width, highlight=False, soft_wrap=False, emoji=False
            )

    @property
    def console(self) -> Any:
        """The rich console (``None`` in plain mode)."""
        return self._console

    def line(self, text: str = "", style: str | None = None) -> None:
        """One line of text (``style`` applies on a terminal only)."""
        if self._console is None:
            print(text, file=self.stream)
        else:
            self._console.print(text, style=style, markup=False, highlight=False)

    def dim(self, text: str) -> None:
        """A line that matters less (captured SDK chatter, hints)."""
        self.line(text, style="dim")

    def table(self, table: TableLike) -> bool:
        """Render ``table``: fitted to the terminal, or plain with long cells whole.
        Returns whether a one-line (``"clip"``) cell was cut short to fit."""
        if self._console is None:
            if table.title:
                print(f"{table.title}:", file=self.stream)
            print(format_table(table.headers, table.rows), file=self.stream)
            return False
        shown = fitting_columns(table, self._console.width)
        self._console.print(rich_table(table, shown, self._console.width))
        hidden = [h for i, h in enumerate(table.headers) if i not in shown]
        if hidden:
            self.dim(f"(too narrow for: {', '.join(hidden)}; widen the terminal or use --plain)")
        return clipped(table, shown, self._console.width)

    def pairs(self, rows: Sequence[tuple[str, str]], title: str | None = None) -> None:
        """A two-column ``field  value`` listing."""
        if self._console is None:
            if title:
                print(f"{title}:", file=self.stream)
            print(format_table(("field", "value"), rows), file=self.stream)
            return
        from rich import box
        from rich.table import Table

        grid = Table(box=box.SIMPLE_HEAD, title=title, title_justify="left", show_header=False)
        grid.add_column(style="bold", no_wrap=True)
        grid.add_column(overflow="fold")
        for key, value in rows:
            grid.add_row(key, value)
        self._console.print(grid)


#: The narrowest a wrapping column (reasons, hints) is allowed to get.
WRAP_MIN_WIDTH = 24
#: The narrowest a one-line column gets where names and numbers leave little room.
_CLIP_MIN_WIDTH = 8


def fitting_columns(table: TableLike, width: int) -> list[int]:
    """The columns of ``table`` to show in ``width`` characters: all when they fit (words
    wrap to at least :data:`WRAP_MIN_WIDTH`), else without the highest priorities first."""
    priority = list(table.priority) or [0] * len(table.headers)
    shown = list(range(len(table.headers)))

    # Each column also takes its padding (2) and a separator (1).
    while sum(column_width(table, i) + 3 for i in shown) > width and max(
        priority[i] for i in shown
    ):
        worst = max(priority[i] for i in shown)
        shown.remove(max(i for i in shown if priority[i] == worst))
    return shown


def clip_room(table: TableLike, shown: Sequence[int], width: int) -> int:
    """How wide each ``"clip"`` column of the ``shown`` ones may be in ``width``
    characters: an even share of what the columns that never break leave (names and
    numbers stay whole; a few characters at the least)."""
    flexible = [i for i in shown if table.overflow[i] != "none"] or [0]
    fixed = sum(column_width(table, i) + 3 for i in shown if table.overflow[i] == "none")
    return max(_CLIP_MIN_WIDTH, (width - fixed) // len(flexible) - 3)


def clipped(table: TableLike, shown: Sequence[int], width: int) -> bool:
    """Whether a ``"clip"`` cell of the ``shown`` columns is cut short in ``width``."""
    room = clip_room(table, shown, width)
    clips = [i for i in shown if table.overflow[i] == "clip"]
    return any(len(row[i]) > room for row in table.rows for i in clips)


def column_width(table: TableLike, index: int) -> int:
    """The width column ``index`` needs: its widest cell when it never wraps, else its
    longest text up to :data:`WRAP_MIN_WIDTH`."""
    cells = [table.headers[index], *(row[index] for row in table.rows)]
    widest = max(len(c) for c in cells)
    return widest if table.overflow[index] == "none" else min(widest, WRAP_MIN_WIDTH)


def rich_table(
    table: TableLike, columns: Sequence[int] | None = None, width: int | None = None
) -> Any:
    """``table`` (only ``columns``, default all) as a :class:`rich.table.Table`; rich fits
    it to the console's width by wrapping the columns that may wrap; a one-line
    (``"clip"``) column is at most its :func:`clip_room` in ``width`` and ends in "…"."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    out = Table(
        box=box.SIMPLE_HEAD,
        title=table.title,
        title_justify="left",
        title_style="bold",
        header_style="bold",
        pad_edge=False,
    )
    shown = list(range(len(table.headers))) if columns is None else list(columns)
    room = clip_room(table, shown, width) if width is not None else None
    for index in shown:
        header, overflow = table.headers[index], table.overflow[index]
        numeric = table.numeric[index]
        clip = overflow == "clip"
        out.add_column(
            header,
            justify="right" if numeric else "left",
            no_wrap=overflow == "none" or clip,
            # Words longer than the column (paths, pip commands) fold rather than vanish.
            overflow="ellipsis" if clip else "fold",
            min_width=None if overflow == "none" else column_width(table, index),
            max_width=room if clip else None,
            ratio=None if overflow == "none" else 1,
        )
    styles = list(table.row_styles) + [None] * (len(table.rows) - len(table.row_styles))
    for row, style in zip(table.rows, styles):
        # Text cells: a plan name or reason is never read as rich markup.
        out.add_row(*(Text(row[i]) for i in shown), style=ROW_STYLES.get(style or ""))
    return out
