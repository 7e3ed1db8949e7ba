"""Reports as files a paper or a spreadsheet takes: CSV, a LaTeX table, a provenance manifest.

Several reports (repeated runs, other machines) export together: every CSV row names its
run, and the LaTeX table has a column per run. Raw latency samples are written one per
row when the report carries them (``LatencyStats.samples_ms``); a report without them
still exports its per-case statistics.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attrs import frozen

from dlopt.reporting.labels import LabelledReport
from dlopt.reporting.tables import inputs_kind, speedup_text, status_text

if TYPE_CHECKING:
    from dlopt.evidence.report import CandidateEvidence, CaseEvidence


def _samples(latency: Any) -> Sequence[float] | None:
    """The raw per-call samples (ms) when the report recorded them."""
    samples = getattr(latency, "samples_ms", None)
    return samples if isinstance(samples, (list, tuple)) else None


def _interval(value: Any) -> tuple[Any, Any, Any]:
    if value is None:
        return None, None, None
    return value.point, value.low, value.high


def _candidates(
    runs: Iterable[LabelledReport],
) -> Iterator[tuple[LabelledReport, CandidateEvidence]]:
    """Every run's candidates, run by run, in report order."""
    for run in runs:
        for c in run.report.candidates:
            yield run, c


def _cases(
    runs: Iterable[LabelledReport],
) -> Iterator[tuple[LabelledReport, CandidateEvidence, CaseEvidence]]:
    """Every candidate's workload cases (none where a report has no per-case evidence)."""
    for run, c in _candidates(runs):
        for case in getattr(c, "cases", ()) or ():
            yield run, c, case


CANDIDATE_FIELDS = (
    "run",
    "plan",
    "status",
    "role",
    "precision",
    "distribution",
    "version",
    "median_ms",
    "mean_ms",
    "p90_ms",
    "p95_ms",
    "p99_ms",
    "mean_ci_low_ms",
    "mean_ci_high_ms",
    "speedup_vs_eager",
    "speedup_vs_eager_low",
    "speedup_vs_eager_high",
    "speedup_vs_native",
    "speedup_vs_native_low",
    "speedup_vs_native_high",
    "confidence_gate_passed",
    "gate_against",
    "verdict",
    "parity_passed",
    "setup_time_s",
    "first_call_time_s",
    "peak_memory_mb",
    "projected_total_ms",
    "break_even_calls_vs_baseline",
    "error_stage",
    "error_message",
    "availability_reason",
)


def candidate_records(runs: Iterable[LabelledReport]) -> list[dict[str, Any]]:
    """One record per run and candidate (:data:`CANDIDATE_FIELDS`)."""
    return [_candidate_record(run, c) for run, c in _candidates(runs)]


def _candidate_record(run: LabelledReport, c: CandidateEvidence) -> dict[str, Any]:
    eager = _interval(c.race.speedup_vs_reference)
    native = _interval(c.race.speedup_vs_baseline)
    error = getattr(c, "error", None)
    parity = c.validation.first_calls
    return {
        "run": run.label,
        "plan": c.name,
        "status": status_text(c),
        "role": str(getattr(c, "role", "")),
        "precision": c.precision,
        "distribution": c.distribution,
        "version": c.version,
        "median_ms": c.latency.median_ms,
        "mean_ms": c.latency.mean_ms,
        "p90_ms": c.latency.p90_ms,
        "p95_ms": c.latency.p95_ms,
        "p99_ms": c.latency.p99_ms,
        "mean_ci_low_ms": c.latency.ci95_low_ms,
        "mean_ci_high_ms": c.latency.ci95_high_ms,
        "speedup_vs_eager": eager[0],
        "speedup_vs_eager_low": eager[1],
        "speedup_vs_eager_high": eager[2],
        "speedup_vs_native": native[0],
        "speedup_vs_native_low": native[1],
        "speedup_vs_native_high": native[2],
        "confidence_gate_passed": c.race.gate_passed,
        "gate_against": c.race.gate_against,
        "verdict": c.race.verdict,
        "parity_passed": None if parity is None else parity.passed,
        "setup_time_s": c.lifecycle.setup_time_s,
        "first_call_time_s": c.lifecycle.first_call_time_s,
        "peak_memory_mb": c.memory.peak_mb,
        "projected_total_ms": c.lifecycle.projected_total_ms,
        "break_even_calls_vs_baseline": c.lifecycle.break_even_calls_vs_baseline,
        "error_stage": None if error is None else str(error.stage),
        "error_message": None if error is None else error.message,
        "availability_reason": c.availability_reason,
    }


CASE_FIELDS = (
    "run",
    "plan",
    "case",
    "weight",
    "first_call_time_s",
    "median_ms",
    "mean_ms",
    "min_ms",
    "p90_ms",
    "p95_ms",
    "p99_ms",
    "stdev_ms",
    "mean_ci_low_ms",
    "mean_ci_high_ms",
    "samples",
    "block_size",
    "rounds",
    "timed_calls",
    "noisy",
    "page_faults_per_call",
    "validation_passed",
    "raw_samples_recorded",
)


def case_records(runs: Iterable[LabelledReport]) -> list[dict[str, Any]]:
    """One record per run, candidate and workload case (:data:`CASE_FIELDS`)."""
    return [_case_record(run, c, case) for run, c, case in _cases(runs)]


def _case_record(run: LabelledReport, c: CandidateEvidence, case: CaseEvidence) -> dict[str, Any]:
    lat = case.latency
    validation = getattr(case, "validation", None)

    def stat(name: str) -> Any:
        return None if lat is None else getattr(lat, name, None)

    return {
        "run": run.label,
        "plan": c.name,
        "case": case.name,
        "weight": case.weight,
        "first_call_time_s": case.first_call_time_s,
        "median_ms": stat("median_ms"),
        "mean_ms": stat("mean_ms"),
        "min_ms": stat("min_ms"),
        "p90_ms": stat("p90_ms"),
        "p95_ms": stat("p95_ms"),
        "p99_ms": stat("p99_ms"),
        "stdev_ms": stat("stdev_ms"),
        "mean_ci_low_ms": stat("mean_low_ms"),
        "mean_ci_high_ms": stat("mean_high_ms"),
        "samples": stat("samples"),
        "block_size": stat("block_size"),
        "rounds": stat("rounds"),
        "timed_calls": stat("timed_calls"),
        "noisy": stat("noisy"),
        "page_faults_per_call": stat("page_faults_per_call"),
        "validation_passed": None if validation is None else validation.passed,
        "raw_samples_recorded": _samples(lat) is not None,
    }


SAMPLE_FIELDS = ("run", "plan", "case", "index", "latency_ms", "block_size")


def sample_records(runs: Iterable[LabelledReport]) -> list[dict[str, Any]]:
    """Every raw latency sample, one record each, in the order they were taken."""
    records = []
    for run, c, case in _cases(runs):
        if case.latency is None:
            continue
        for index, value in enumerate(_samples(case.latency) or ()):
            records.append(
                {
                    "run": run.label,
                    "plan": c.name,
                    "case": case.name,
                    "index": index,
                    "latency_ms": value,
                    "block_size": case.latency.block_size,
                }
            )
    return records


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)  # shortest text that reads back to the same float
    return str(value)


def to_csv(fields: Sequence[str], records: Iterable[dict[str, Any]]) -> str:
    """CSV text (RFC 4180 quoting, ``\\n`` line ends); ``None`` is an empty cell, floats
    are written exactly (``repr``), booleans as ``true``/``false``."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(fields)
    for record in records:
        writer.writerow([_cell(record.get(name)) for name in fields])
    return buffer.getvalue()


# ---------------------------------------------------------------------------- LaTeX

_LATEX_SPECIALS = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
}


def latex_escape(text: str) -> str:
    """``text`` with LaTeX's special characters escaped."""
    return "".join(_LATEX_SPECIALS.get(ch, ch) for ch in text)


def _latex_speedup(c: CandidateEvidence | None) -> str:
    if c is None:
        return "--"
    if c.status in ("unavailable", "rejected"):
        return latex_escape(str(c.status))
    value = speedup_text(c)
    if value == "-":
        return "--"
    return latex_escape(value).replace("[", "$[").replace("]", "]$").replace(", ", ",\\,")


def latex_table(runs: Sequence[LabelledReport]) -> str:
    """A ``tabular`` fragment (booktabs rules) for ``\\input``: one row per plan; with one
    run its precision, median and p99 latency, speedup vs eager with its interval and its
    status; with several, the speedup per run (a column each)."""
    plans: list[str] = []
    precision: dict[str, str] = {}
    for _, c in _candidates(runs):
        if c.name not in plans:
            plans.append(c.name)
            precision[c.name] = c.precision
    lines: list[str] = []
    if len(runs) == 1:
        report = runs[0].report
        lines += [
            r"\begin{tabular}{llrrll}",
            r"\toprule",
            r"Plan & Precision & Median (ms) & p99 (ms) & Speedup vs eager [CI] & Status \\",
            r"\midrule",
        ]
        for c in report.candidates:
            median = "--" if c.latency.median_ms is None else f"{c.latency.median_ms:.3f}"
            p99 = "--" if c.latency.p99_ms is None else f"{c.latency.p99_ms:.3f}"
            status = status_text(c) + (r" $\star$" if c.name == report.selected_plan else "")
            lines.append(
                " & ".join(
                    [
                        latex_escape(c.name),
                        latex_escape(c.precision),
                        median,
                        p99,
                        _latex_speedup(c),
                        latex_escape(status).replace(r"\$\star\$", r"$\star$"),
                    ]
                )
                + r" \\"
            )
    else:
        lines += [
            r"\begin{tabular}{ll" + "l" * len(runs) + "}",
            r"\toprule",
            r"Plan & Precision & " + " & ".join(latex_escape(run.label) for run in runs) + r" \\",
            r"\midrule",
        ]
        for name in plans:
            cells = [latex_escape(name), latex_escape(precision[name])]
            for run in runs:
                found = next((c for c in run.report.candidates if c.name == name), None)
                cell = _latex_speedup(found)
                if found is not None and found.name == run.report.selected_plan:
                    cell += r" $\star$"
                cells.append(cell)
            lines.append(" & ".join(cells) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    header = (
        "% dlopt: speedup vs eager fp32 with its confidence interval; "
        "$\\star$ marks the selected plan. Needs \\usepackage{booktabs}.\n"
    )
    return header + "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------- provenance


def provenance(runs: Sequence[LabelledReport]) -> dict[str, Any]:
    """What each run was measured on and how: versions, device, ISA, policy, seeds,
    tolerances, workload and inputs, each plan's distribution, version and options."""
    from dlopt.platform.serialization import to_jsonable

    out = []
    for run in runs:
        r = run.report
        m = getattr(r, "measurement", None)
        out.append(
            {
                "run": run.label,
                "source": run.source,
                "schema_version": r.schema_version,
                "dlopt_version": r.dlopt_version,
                "created_at": r.created_at,
                "target": to_jsonable(r.target),
                "runtime": to_jsonable(r.runtime),
                "objective": str(r.objective),
                "constraints": to_jsonable(r.constraints),
                "quality_tolerances": r.quality,
                "measurement_policy": None if m is None else to_jsonable(m.policy),
                "seed": None if m is None else m.seed,
                "confidence": None if m is None else m.confidence,
                "stop_reason": None if m is None else str(m.stop_reason),
                "workload": to_jsonable(r.workload),
                "inputs": inputs_kind(r),
                "plans": [
                    {
                        "plan": c.name,
                        "plugin": c.plugin,
                        "distribution": c.distribution,
                        "version": c.version,
                        "precision": c.precision,
                        "options": c.options,
                    }
                    for c in r.candidates
                ],
                "plugin_failures": to_jsonable(getattr(r, "plugin_failures", ())),
            }
        )
    return {"runs": out}


# ---------------------------------------------------------------------------- the bundle


@frozen
class ExportResult:
    """What :func:`export` wrote, and the figures it could not draw and why."""

    files: tuple[Path, ...]
    figures_missing: str | None = None


#: The files :func:`export` writes at the top of its directory (figures go in ``figures/``).
EXPORTED_FILES = ("candidates.csv", "cases.csv", "samples.csv", "table.tex", "provenance.json")


def export(runs: Sequence[LabelledReport], output_dir: str | os.PathLike[str]) -> ExportResult:
    """Write ``candidates.csv``, ``cases.csv``, ``samples.csv``, ``table.tex``,
    ``provenance.json`` and, with matplotlib, ``figures/*.svg`` into ``output_dir``."""
    from dlopt.platform.serialization import atomic_write_text, dumps, strict_jsonable
    from dlopt.reporting.figures import FiguresUnavailable, draw_figures

    root = Path(output_dir)
    root.mkdir(parents=True, exist_ok=True)
    written = [
        atomic_write_text(
            root / "candidates.csv", to_csv(CANDIDATE_FIELDS, candidate_records(runs))
        ),
        atomic_write_text(root / "cases.csv", to_csv(CASE_FIELDS, case_records(runs))),
        atomic_write_text(root / "samples.csv", to_csv(SAMPLE_FIELDS, sample_records(runs))),
        atomic_write_text(root / "table.tex", latex_table(runs)),
        atomic_write_text(
            root / "provenance.json", dumps(strict_jsonable(provenance(runs))) + "\n"
        ),
    ]
    missing = None
    try:
        figures = draw_figures(runs)
    except FiguresUnavailable as exc:
        missing = str(exc)
    else:
        (root / "figures").mkdir(exist_ok=True)
        for figure in figures:
            written.append(atomic_write_text(root / "figures" / f"{figure.name}.svg", figure.svg))
    return ExportResult(tuple(written), missing)
