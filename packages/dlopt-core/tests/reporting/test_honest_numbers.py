"""Numbers a reader can take at their word: an interval too thin to bound anything is
printed as not measured, and a plan the race had no room for is ``not_raced``, not
``lost``, wherever a status is shown."""

from __future__ import annotations

import math

import attrs
import pytest

from dlopt.evidence.report import OptimizationReport, evolve_candidate
from dlopt.measurement.stats import (
    MAX_PRINTED_BOUND,
    MIN_PRINTED_ROUNDS,
    RatioInterval,
    describe_ratio,
)
from dlopt.reporting.export import candidate_records, latex_table
from dlopt.reporting.html import render_html
from dlopt.reporting.labels import LabelledReport
from dlopt.reporting.tables import candidate_summary, candidates_table, interval_text
from dlopt.vocabulary import Status


def interval(point: float, low: float | None, high: float | None, rounds: int) -> RatioInterval:
    return RatioInterval(point, low, high, 0.95, "test", rounds)


@pytest.mark.parametrize(
    ("thin", "shown"),
    [
        (interval(2.0, 1.5, 2.5, MIN_PRINTED_ROUNDS - 1), "not measured (1 round)"),
        (interval(2.0, 1.5, 2.5, 0), "not measured (0 rounds)"),
        # The summary that printed a leader at [0.000, 4.3e+300].
        (interval(2.0, 0.0, 4.3e300, 8), "not measured (8 rounds, unbounded)"),
        (interval(2.0, 0.5, MAX_PRINTED_BOUND * 1.01, 3), "not measured (3 rounds, unbounded)"),
        (interval(2.0, 0.5, math.nan, 3), "not measured (3 rounds, unbounded)"),
        (interval(2.0, 0.5, None, 3), "not measured (3 rounds, unbounded)"),
    ],
)
def test_an_interval_from_one_round_or_reaching_past_a_million_is_not_printed(thin, shown):
    # The point stays: it is what the race measured; its bounds bound nothing.
    assert describe_ratio(thin) == f"2.000x [{shown}]"
    assert interval_text(thin) == f"2.00x [{shown}]"
    assert interval_text(thin, unit="") == f"2.00 [{shown}]"


def test_an_interval_of_two_rounds_within_bounds_is_printed():
    shown = interval(2.0, 1.5, MAX_PRINTED_BOUND, MIN_PRINTED_ROUNDS)
    assert describe_ratio(shown) == f"2.000x [1.500, {MAX_PRINTED_BOUND:.3f}]"
    assert interval_text(shown) == f"2.00x [1.50, {MAX_PRINTED_BOUND:.2f}]"


def with_candidate(report: OptimizationReport, name: str, **changes) -> OptimizationReport:
    candidates = tuple(
        evolve_candidate(c, **changes) if c.name == name else c for c in report.candidates
    )
    return attrs.evolve(report, candidates=candidates)


def test_the_leaders_table_cell_does_not_print_an_unbounded_interval(race_report):
    leader = race_report.selected_plan
    report = with_candidate(race_report, leader, speedup_vs_eager=interval(2.0, 0.0, 4.3e300, 8))
    row = next(r for r in candidates_table(report).rows if r[0] == leader)
    assert row[5] == "2.00 [not measured (8 rounds, unbounded)]"
    assert "e+300" not in render_html(report) and "4300000" not in render_html(report)


def status_everywhere(report: OptimizationReport, name: str) -> set[str]:
    """The status ``name`` shows in the terminal table, its summary, the CSV, the LaTeX
    table and the HTML page."""
    table = candidates_table(report)
    column = table.headers.index("status")
    shown = {next(r[column] for r in table.rows if r[0] == name)}
    cand = next(c for c in report.candidates if c.name == name)
    shown.add(dict(candidate_summary(cand))["status"])
    runs = [LabelledReport("run", report)]
    shown.add(next(r["status"] for r in candidate_records(runs) if r["plan"] == name))
    line = next(line for line in latex_table(runs).splitlines() if line.startswith(name))
    shown.add(line.split(" & ")[-1].removesuffix(r" \\").strip().replace(r"\_", "_"))
    if f'{name} <span class="muted">(not_raced)</span>' in render_html(report):
        shown.add("not_raced (html)")
    return shown


def test_a_plan_built_but_left_out_of_the_race_is_not_raced_not_lost(race_report):
    lost = [c.name for c in race_report.candidates if c.status == Status.LOST]
    assert lost, "the race report has a plan that lost"
    name = lost[0]
    assert status_everywhere(race_report, name) == {"lost"}
    report = with_candidate(
        race_report, name, not_raced="the race's share of the time budget had no room for it"
    )
    assert status_everywhere(report, name) == {"not_raced", "not_raced (html)"}
    # The report itself is unchanged: the status it keeps, and why, for readers of JSON.
    assert next(c for c in report.candidates if c.name == name).status == Status.LOST
