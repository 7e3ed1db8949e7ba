"""``dlopt export``: reports as CSV, a LaTeX table, a provenance manifest and figures."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from dlopt.cli.cmd_report import read_report
from dlopt.cli.common import EXIT_OK, finish_command
from dlopt.cli.console import Output


def add_export_command(sub: Any) -> None:
    """Register ``dlopt export`` on the subcommand parsers ``sub``."""
    p = sub.add_parser(
        "export",
        help="write reports as CSV, a LaTeX table, provenance and figures",
        description="Export one or more reports (repeated runs, other machines) together: "
        "candidates.csv, cases.csv, samples.csv (every raw latency sample), table.tex (a "
        "column per run), provenance.json and figures/*.svg (with matplotlib).",
    )
    p.add_argument("reports", nargs="+", metavar="REPORT", help="report JSON files")
    p.add_argument("--output-dir", "-o", required=True, metavar="DIR", help="write here")
    finish_command(p, _cmd_export)


def _cmd_export(args: argparse.Namespace) -> int:
    from dlopt.cli.preflight import check_output_dir
    from dlopt.reporting.export import EXPORTED_FILES, export
    from dlopt.reporting.labels import label_runs

    check_output_dir(
        "--output-dir",
        args.output_dir,
        what="the export",
        inputs=[("REPORT", path) for path in args.reports],
        written_names=EXPORTED_FILES,
    )
    reports = [read_report(path) for path in args.reports]
    root = Path(args.output_dir)
    result = export(label_runs(reports, args.reports), root)
    out = Output(plain=args.plain or None)
    for path in result.files:
        out.line(f"wrote {path}")
    if result.figures_missing:
        out.line(f"figures not drawn: {result.figures_missing}", style="yellow")
    return EXIT_OK
