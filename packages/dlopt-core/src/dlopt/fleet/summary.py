"""``dlopt fleet status`` and ``report``: one table across jobs and machine kinds.

The table is a :class:`dlopt.reporting.tables.Table`, so the terminal, CSV and HTML show it
with the renderers every report uses; the CSV/LaTeX export and the HTML evidence per race
are :mod:`dlopt.reporting`'s own, over the stored reports (a run per job@kind).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from attrs import frozen

from dlopt.evidence.report import OptimizationReport
from dlopt.fleet.result_store import FleetResult, ResultStore
from dlopt.fleet.spec import FleetSpec
from dlopt.reporting.export import to_csv
from dlopt.reporting.labels import LabelledReport
from dlopt.reporting.tables import NOWRAP, WRAP, Table, interval_text, number


@frozen
class Entry:
    """One (job, kind) of the spec with what the store holds for it."""

    job: str
    kind: str
    result: FleetResult | None
    report: OptimizationReport | None = None

    @property
    def label(self) -> str:
        return f"{self.job}@{self.kind}"


def entries(spec: FleetSpec, store: ResultStore, *, reports: bool = False) -> list[Entry]:
    """Every (job, kind) of ``spec`` in its order, with its stored result (and report)."""
    found = []
    for job, kind in spec.pairs():
        result = store.read_result(spec.name, job.name, kind)
        report = store.read_report(spec.name, job.name, kind) if reports and result else None
        found.append(Entry(job.name, kind, result, report))
    return found


def failures_text(result: FleetResult) -> str:
    """``faulty: crashed at measure (SIGSEGV); slow: validation: ...`` or ``-``."""
    parts = []
    for failure in result.failures:
        if failure.fault:
            parts.append(f"{failure.plan}: {failure.fault}")
        else:
            stage = f"{failure.stage}: " if failure.stage else ""
            parts.append(f"{failure.plan}: {stage}{failure.message}")
    return "; ".join(parts) or "-"


FLEET_COLUMNS = (
    ("job", NOWRAP, False, 0),
    ("machine kind", NOWRAP, False, 0),
    ("status", NOWRAP, False, 0),
    ("selected plan", NOWRAP, False, 0),
    ("speedup vs eager [CI]", NOWRAP, True, 0),
    ("regret bound", NOWRAP, True, 2),
    ("time to decision s", NOWRAP, True, 1),
    ("cached", NOWRAP, False, 3),
    ("node", NOWRAP, False, 3),
    ("failures (culprit)", WRAP, False, 1),
)


def fleet_table(found: Sequence[Entry]) -> Table:
    """One row per (job, kind): the selected plan, its speedup interval, the regret bound,
    the time to decision and the plans that failed, each with its culprit."""
    rows: list[tuple[str | None, ...]] = []
    styles: list[str | None] = []
    for entry in found:
        r = entry.result
        if r is None:
            rows.append(
                (entry.job, entry.kind, "not run", None, None, None, None, None, None, None)
            )
            styles.append("unavailable")
            continue
        failures = failures_text(r) if r.status == "done" else (r.error or "-")
        rows.append(
            (
                entry.job,
                entry.kind,
                r.status,
                r.selected_plan,
                _speedup(r),
                number(r.regret_bound, "{:.3f}") if r.regret_bound is not None else None,
                number(r.time_to_decision_s, "{:.1f}"),
                None if r.cache_hit is None else ("yes" if r.cache_hit else "no"),
                r.node_id[:12] if r.node_id else None,
                failures,
            )
        )
        styles.append("failed" if r.status != "done" else None)
    return Table.build(FLEET_COLUMNS, rows, row_styles=styles, title="fleet")


def _speedup(result: FleetResult) -> str | None:
    if result.speedup is not None:
        return interval_text(result.speedup, unit="")
    # The reference kept: eager fp32 has no interval against itself.
    return "1 (reference)" if result.status == "done" else None


def fleet_csv(table: Table) -> str:
    """The fleet table as CSV (the export's own writer)."""
    records = [dict(zip(table.headers, row)) for row in table.rows]
    return to_csv(table.headers, records)


def runs_of(found: Sequence[Entry]) -> list[LabelledReport]:
    """The stored reports as export runs, labelled ``job@kind``."""
    return [LabelledReport(e.label, e.report) for e in found if e.report is not None]


def fleet_html(spec: FleetSpec, found: Sequence[Entry]) -> str:
    """One self-contained page: the fleet table, then each race's decision and candidates
    (the HTML report's own pieces)."""
    from dlopt.reporting.html import fleet_page

    return fleet_page(
        f"dlopt fleet: {spec.name}",
        fleet_table(found),
        [(e.label, e.report) for e in found if e.report is not None],
    )


def write_text(path: str | os.PathLike[str], text: str) -> Path:
    from dlopt.platform.serialization import atomic_write_text

    return atomic_write_text(path, text)
