"""``dlopt report``: a saved report as tables, as JSON, one plan's evidence, or HTML."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dlopt.cli.common import EXIT_OK, finish_command
from dlopt.cli.console import Output
from dlopt.errors import ConfigurationError
from dlopt.reporting.tables import (
    PAGE_FAULT_HINT_THRESHOLD,
    candidate_summary,
    candidates_table,
    decision_lines,
    decision_time_line,
    evidence_tables,
    guard_line,
    headline,
    inputs_kind,
    machine_line,
    measurement_line,
    quantized_share,
    race_notes,
    serving_line,
    throughput_notes,
    throughput_table,
    unavailable_summary_table,
    unavailable_table,
)

if TYPE_CHECKING:
    from dlopt.evidence.report import OptimizationReport

__all__ = [
    "PAGE_FAULT_HINT_THRESHOLD",
    "add_report_command",
    "print_candidate",
    "print_report",
    "quantized_share",
    "read_report",
]


def add_report_command(sub: Any) -> None:
    """Register ``dlopt report`` on the subcommand parsers ``sub``."""
    p = sub.add_parser(
        "report",
        help="show a saved report: tables, one plan's evidence, JSON or an HTML page",
        description="Show a report written by `dlopt select --report`.",
        epilog="Examples: dlopt report r.json | dlopt report r.json --candidate fx_inductor | "
        "dlopt report r.json --html r.html",
    )
    p.add_argument("path", help="report JSON written by dlopt select --report")
    p.add_argument("--json", action="store_true", help="print the report's JSON as it is")
    p.add_argument(
        "--candidate", metavar="PLAN", help="one plan's evidence per case (validation, latency)"
    )
    p.add_argument(
        "--html",
        metavar="OUT.html",
        help="write one self-contained HTML page (tables, figures, provenance) here",
    )
    finish_command(p, _cmd_report)


def read_report(path_text: str) -> OptimizationReport:
    """Load a report named on the command line; every failure is a usage error that says
    what the file is and what to do."""
    from dlopt.evidence.report import load_report
    from dlopt.platform.fileio import FileTooLargeError

    path = Path(path_text)
    try:
        return load_report(path)
    except FileNotFoundError:
        raise ConfigurationError(f"no report at {path}") from None
    except IsADirectoryError:
        inside = path / "report.json"
        hint = f"; did you mean {inside}?" if inside.is_file() else ""
        raise ConfigurationError(f"{path} is a directory, not a report file{hint}") from None
    except OSError as exc:
        raise ConfigurationError(f"cannot read {path}: {exc.strerror or exc}") from None
    except FileTooLargeError as exc:
        raise ConfigurationError(str(exc)) from None
    except ValueError as exc:
        raise ConfigurationError(f"{path} is not a dlopt report: {exc}") from exc


#: Said under a table whose one-line cells were cut short on a terminal.
CLIPPED_HINT = (
    "(cut to one line: dlopt report FILE --candidate PLAN shows a plan's whole text, "
    "--plain every row whole)"
)


def print_report(report: OptimizationReport, out: Output | None = None) -> None:
    """The candidates table, the plans unavailable here, the race's summary and the
    decision with its reason. On a terminal a plan's notes take one line and the plans
    unavailable one line per distribution (:data:`CLIPPED_HINT` says where the whole
    text is); plain output keeps every cell whole and every unavailable plan's row."""
    out = out if out is not None else Output()
    cut = out.table(candidates_table(report, include_unavailable=False))
    terminal = out.console is not None
    unavailable = (unavailable_summary_table if terminal else unavailable_table)(report)
    if unavailable is not None:
        out.line()
        cut = out.table(unavailable) or cut
    if cut:
        out.dim(CLIPPED_HINT)
    line = measurement_line(report)
    if line:
        out.line()
        out.line(line)
    for note in race_notes(report):
        out.line(note, style="yellow")
    curves = throughput_table(report)
    if curves is not None:
        out.line()
        out.table(curves)
        for note in throughput_notes(report):
            out.line(note)
    selected, reason = decision_lines(report)
    out.line()
    out.line(selected, style="bold green")
    out.line(reason)
    for line in (serving_line(report), guard_line(report)):
        if line is not None:
            out.line(line)
    for line in (decision_time_line(report), machine_line(report)):
        if line is not None:
            out.line(line)


def print_candidate(report: OptimizationReport, name: str, out: Output) -> None:
    """``--candidate PLAN``: its headline facts, then per case its latency statistics and
    its validation metrics (before the race, after it, and the final check)."""
    import difflib

    names = [c.name for c in report.candidates]
    if name not in names:
        close = difflib.get_close_matches(name, names, n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
        raise ConfigurationError(
            f"no plan named {name!r} in this report{hint} (plans: {', '.join(names)})"
        )
    cand = report.candidate(name)
    out.pairs(candidate_summary(cand), title=name)
    for table in evidence_tables(cand):
        out.line()
        out.table(table)


def _cmd_report(args: argparse.Namespace) -> int:
    from dlopt.cli.preflight import check_output_file

    check_output_file("--html", args.html, what="the HTML page", inputs=[("the report", args.path)])
    report = read_report(args.path)
    if args.json:
        from dlopt.evidence.report import MAX_REPORT_BYTES
        from dlopt.platform.fileio import read_bytes_capped

        # The file as written (fields this dlopt does not know are kept), once it is known
        # to be a report.
        text = read_bytes_capped(args.path, MAX_REPORT_BYTES).decode("utf-8")
        print(text.rstrip("\n"))
        return EXIT_OK
    out = Output(plain=args.plain or None)
    if args.html:
        from dlopt.reporting.html import write_html

        result = write_html(report, args.html)
        out.line(f"html: {result.path}")
        if result.missing_figures:
            out.dim(result.missing_figures)
        return EXIT_OK
    if args.candidate:
        print_candidate(report, args.candidate, out)
        return EXIT_OK
    out.line(headline(report))
    kind = inputs_kind(report)
    if kind:
        out.line(f"inputs: {kind}")
    print_report(report, out)
    return EXIT_OK
