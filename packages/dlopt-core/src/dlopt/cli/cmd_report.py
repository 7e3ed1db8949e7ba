"""``dlopt report`` and the candidates table both ``report`` and ``select`` print."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dlopt.cli.common import EXIT_OK
from dlopt.cli.tables import format_table
from dlopt.errors import ConfigurationError

if TYPE_CHECKING:
    from dlopt.report import OptimizationReport

#: Minor page faults per call above which the table suggests allocator tuning.
PAGE_FAULT_HINT_THRESHOLD = 100


def add_report_command(sub: Any) -> None:
    """Register ``dlopt report`` on the subcommand parsers ``sub``."""
    p = sub.add_parser("report", help="print a saved report as a table")
    p.add_argument("path", help="report JSON written by dlopt select --report")
    p.set_defaults(handler=_cmd_report)


def _fmt(value: float | None, pattern: str = "{:.3f}") -> str:
    return "-" if value is None else pattern.format(value)


def quantized_share(metadata: dict[str, Any]) -> str | None:
    """``"quantized 1 of 8 ops"`` when a quantizing plan left part of the model in full
    precision (its label alone would overstate it); ``None`` otherwise."""
    fraction = metadata.get("quantized_fraction")
    if not isinstance(fraction, (int, float)) or fraction >= 1:
        return None
    for unit in ("ops", "layers"):
        done, of = metadata.get(f"quantized_{unit}"), metadata.get(f"quantizable_{unit}")
        if isinstance(done, int) and isinstance(of, int):
            return f"quantized {done} of {of} {unit}"
    return f"quantized {fraction:.0%}"


def candidates_table(report: OptimizationReport) -> str:
    """One row per candidate: status, latency, speedup with its interval, costs, notes."""
    rows = []
    for c in report.candidates:
        speedup = c.speedup_vs_eager
        speed_text = "-"
        if c.name == "eager_fp32":
            speed_text = "1 (reference)"
        elif speedup is not None and speedup.point is not None:
            speed_text = f"{speedup.point:.2f} [{_fmt(speedup.low, '{:.2f}')}, {_fmt(speedup.high, '{:.2f}')}]"
        note = ""
        if c.error is not None:
            note = f"{c.error.stage}: {c.error.message}"
        elif c.status == "unavailable":
            note = c.availability_reason or ""
        elif c.measurement_verdict:
            note = c.measurement_verdict + (" (noisy)" if c.noisy else "")
            faults = max(
                (cs.latency.page_faults_per_call or 0 for cs in c.cases if cs.latency), default=0
            )
            if faults >= PAGE_FAULT_HINT_THRESHOLD:
                # glibc handing large buffers back to the OS every call: a real, fixable cost.
                note += f"; {faults:.0f} page faults/call (allocator churn: see MALLOC_MMAP_THRESHOLD_ or jemalloc)"
        coverage = quantized_share(c.metadata)
        if coverage and c.status != "unavailable":
            note = f"{coverage}; {note}" if note else coverage
        rows.append(
            (
                c.name,
                c.status,
                c.precision,
                _fmt(c.latency_ms),
                _fmt(c.latency_p99_ms),
                speed_text,
                _fmt(c.setup_time_s, "{:.2f}"),
                _fmt(c.first_call_time_s, "{:.2f}"),
                _fmt(c.peak_memory_mb, "{:.0f}"),
                note if len(note) < 140 else note[:137] + "...",
            )
        )
    return format_table(
        (
            "plan",
            "status",
            "prec",
            "median ms",
            "p99 ms",
            "speedup vs eager [CI]",
            "setup s",
            "1st call s",
            "peak MB",
            "notes",
        ),
        rows,
    )


def print_report(report: OptimizationReport) -> None:
    """The candidates table, the race's summary and the decision with its reason."""
    print(candidates_table(report))
    m = report.measurement
    if m is not None:
        print(
            f"\nmeasurement: {m.rounds} rounds, {m.timed_calls} timed calls, {m.total_time_s:.1f}s, "
            f"stop: {m.stop_reason}, seed {m.seed}, confidence {m.confidence:g}"
        )
    print(f"\nselected: {report.selected_plan} (baseline {report.baseline})")
    print(f"reason: {report.selection_reason}")


def _cmd_report(args: argparse.Namespace) -> int:
    from dlopt.fileio import FileTooLargeError
    from dlopt.report import load_report

    path = Path(args.path)
    try:
        report = load_report(path)
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
    print(
        f"workload: {report.workload.name}; objective: {report.objective}; target: {report.target.device}"
    )
    print_report(report)
    return EXIT_OK
