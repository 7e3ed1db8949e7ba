"""The one plain-text table printer of the command line."""

from __future__ import annotations

from collections.abc import Sequence

#: The rule under the last column is at most this wide (long reasons and hints).
_LAST_RULE_WIDTH = 40


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
