"""The report's tables and the one renderer: fitted on a terminal, plain text otherwise."""

from __future__ import annotations

import io

import pytest

from dlopt.cli.console import Output, fitting_columns, wants_plain
from dlopt.reporting.tables import (
    candidate_summary,
    candidates_table,
    evidence_tables,
    gate_text,
    latency_table,
    unavailable_table,
    validation_table,
)


def _render(table, width: int) -> str:
    buffer = io.StringIO()
    Output(buffer, plain=False, width=width).table(table)
    return buffer.getvalue()


def test_candidates_table_says_what_happened_to_every_plan(race_report):
    table = candidates_table(race_report)
    rows = {row[0]: dict(zip(table.headers, row)) for row in table.rows}
    assert set(rows) == {c.name for c in race_report.candidates}
    winner = rows[race_report.selected_plan]
    assert winner["status"] == "selected" and winner["gate"] == "passed vs eager_fp32"
    assert winner["vs eager [CI]"].count("[") == 1 and winner["parity"] == "ok"
    assert rows["broken"]["notes"].startswith("build: RuntimeError: fake build failed")
    assert rows["wrong"]["notes"].startswith("validation:")
    assert rows["nosdk"]["notes"] == "fake SDK missing"
    styles = dict(zip((r[0] for r in table.rows), table.row_styles))
    assert styles[race_report.selected_plan] == "selected"
    assert styles["broken"] == "failed" and styles["nosdk"] == "unavailable"


def test_unavailable_providers_come_with_reasons_and_hints(race_report):
    table = unavailable_table(race_report)
    assert table is not None
    assert table.rows == (("nosdk", "-", "fake SDK missing", "pip install fake-sdk"),)


@pytest.mark.parametrize("width", [80, 100, 140])
def test_the_terminal_table_fits_its_width_and_keeps_names_whole(race_report, width):
    text = _render(candidates_table(race_report), width)
    assert max(len(line) for line in text.splitlines()) <= width
    for cand in race_report.candidates:
        # Names never break, and a plan's notes keep to its one line.
        rows = [line for line in text.splitlines() if line.startswith(f" {cand.name} ")]
        assert len(rows) == 1, text
    (broken,) = [line for line in text.splitlines() if line.startswith(" broken ")]
    assert "build: " in broken  # the reason shows, cut short where it does not fit
    assert ("aten::fake" in broken) == (not broken.rstrip().endswith("…"))


def test_narrow_terminals_drop_the_least_important_columns_first(race_report):
    table = candidates_table(race_report)
    wide, narrow = fitting_columns(table, 400), fitting_columns(table, 80)
    assert wide == list(range(len(table.headers)))
    kept = {table.headers[i] for i in narrow}
    assert {"plan", "status", "median ms", "vs eager [CI]", "notes"} <= kept
    assert "peak MB" not in kept
    assert "too narrow for" in _render(table, 80)


def test_install_hints_fold_instead_of_widening_the_table(unavailable_report):
    table = unavailable_table(unavailable_report)
    assert table is not None
    text = _render(table, 80)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "cu126" in text and "needs a CUDA GPU" in text.replace("\n", " ")


def test_plain_text_when_not_a_terminal_or_asked():
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert wants_plain(io.StringIO()) is True
    assert wants_plain(Tty(), environ={}) is False
    assert wants_plain(Tty(), plain=True, environ={}) is True
    assert wants_plain(Tty(), environ={"NO_COLOR": "1"}) is True
    assert wants_plain(Tty(), environ={"TERM": "dumb"}) is True


def test_plain_output_keeps_long_cells_whole(race_report):
    buffer = io.StringIO()
    Output(buffer).table(candidates_table(race_report))
    text = buffer.getvalue()
    broken = next(line for line in text.splitlines() if line.startswith("broken"))
    assert "build: RuntimeError: fake build failed: unsupported operator aten::fake" in broken
    assert "\x1b[" not in text  # no colour codes in a pipe


def test_edge_cases_render_everywhere(edge_report):
    name, report = edge_report
    for width in (80, 160):
        text = _render(candidates_table(report), width)
        assert report.selected_plan in text
    for cand in report.candidates:
        candidate_summary(cand)
        latency_table(cand)
        for which in ("parity", "revalidation", "final_check"):
            validation_table(cand, which)
    if name == "only_unavailable":
        table = unavailable_table(report)
        assert table is not None and len(table.rows) == len(report.candidates) - 1
    if name == "bare":
        assert all(row[3] == "-" for row in candidates_table(report).rows)


def test_latency_and_validation_per_case(race_report):
    cand = race_report.candidate(race_report.selected_plan)
    latency = latency_table(cand)
    assert [row[0] for row in latency.rows] == ["b1", "b4"]
    parity = validation_table(cand, "parity")
    assert parity is not None and {row[0] for row in parity.rows} == {"b1", "b4"}
    assert all(row[7] == "ok" for row in parity.rows)
    wrong = validation_table(race_report.candidate("wrong"), "parity")
    assert wrong is not None and "failed" in {row[7] for row in wrong.rows}


def test_evidence_tables_show_latency_then_each_validation_a_plan_went_through(race_report):
    winner = race_report.candidate(race_report.selected_plan)
    name = winner.name
    assert [table.title for table in evidence_tables(winner)] == [
        f"{name}: latency per case",
        f"{name}: parity",
        f"{name}: revalidation",
        f"{name}: final check",
    ]
    # Failed at build: never measured nor validated, so no evidence tables.
    assert evidence_tables(race_report.candidate("broken")) == []


def test_race_notes_name_open_comparisons_and_advice_where_recorded(race_report):
    from types import SimpleNamespace

    from dlopt.reporting.tables import measurement_line, race_notes

    assert all(isinstance(note, str) for note in race_notes(race_report))
    measurement = SimpleNamespace(
        **{f: getattr(race_report.measurement, f) for f in ("rounds", "timed_calls", "seed")},
        total_time_s=12.0,
        stop_reason="time_budget",
        confidence=0.95,
        budget_s=12.0,
        leader="fast",
        regret_bound=1.04,
        open_comparisons=(
            SimpleNamespace(
                candidate="mid",
                against="eager_fp32",
                kind="gate",
                rounds=9,
                rounds_needed=30,
                budget_s_needed=40.0,
            ),
            SimpleNamespace(
                candidate="fast",
                against="mid",
                kind="leader",
                rounds=9,
                rounds_needed=None,
                budget_s_needed=None,
            ),
        ),
        allocator=SimpleNamespace(advice="set MALLOC_MMAP_THRESHOLD_=1048576"),
    )
    # The selection spent 20 s, 12 of them racing: 28 more seconds of race need 48.
    report = SimpleNamespace(measurement=measurement, decision_time=SimpleNamespace(spent_s=20.0))
    assert "12.0s of a 12.0s budget" in measurement_line(report)
    assert race_notes(report) == [
        "leader: fast; another plan may still be up to 1.04x faster",
        "open: mid vs eager_fp32 (the gate) after 9 rounds; about 30 rounds would decide it: "
        "rerun with --time-budget 48",
        "open: fast vs mid (within reach of) after 9 rounds; no budget would decide it "
        "(the estimate sits on the bar)",
        "allocator: set MALLOC_MMAP_THRESHOLD_=1048576",
    ]


def test_eliminated_hopeless_and_not_applicable_plans_say_what_decided():
    from dlopt.testing.fake_race import FakeRace
    from dlopt.testing.models import StructuredMLP

    from .conftest import _workload

    race = FakeRace(seed=5)
    optimizer = race.optimizer(
        race.fake("eager_fp32", 2e-3),
        race.fake("fast", 1e-3),
        race.fake("good", 1.25e-3),
        race.fake("crawl", 0.2),
        race.fake("layout", 1e-3, fail="not_applicable"),
    )
    with optimizer.select(StructuredMLP().eval(), _workload()) as decision:
        report = decision.report
    table = candidates_table(report)
    rows = {row[0]: dict(zip(table.headers, row)) for row in table.rows}
    # Eliminated against the leader: the interval that decided, not its few-round one.
    good = report.candidate("good")
    assert good.measurement_verdict in ("dropped", "faster") and good.eliminated_by == "fast"
    assert good.elimination_speedup is not None and good.elimination_speedup.high < 1 / 1.02
    assert "eliminated: 0." in rows["good"]["notes"]
    assert rows["good"]["notes"].endswith("of fast's speed")
    assert rows["good"]["vs eager [CI]"].endswith("(eliminated)")
    assert "eliminated at round" in good.measurement_note
    # 100x slower: left at warm-up, with the rule and the numbers.
    crawl = report.candidate("crawl")
    assert crawl.eliminated_by == "eager_fp32" and crawl.elimination_speedup is None
    assert rows["crawl"]["notes"].startswith("left at warm-up")
    assert all(c.latency is None or c.latency.rounds == 0 for c in crawl.cases)
    # Does not apply: listed as such, not as a failure.
    layout = report.candidate("layout")
    assert layout.status == "not_applicable"
    assert rows["layout"]["notes"] == (
        "not applicable: the fake layout needs image inputs; this workload has none"
    )
    assert dict(zip((r[0] for r in table.rows), table.row_styles))["layout"] == "unavailable"


def test_the_leader_line_reads_as_identified_within_the_zone():
    from types import SimpleNamespace

    from dlopt.measurement import MeasurementPolicy
    from dlopt.reporting.tables import race_notes

    measurement = SimpleNamespace(
        leader="fast",
        regret_bound=1.0,
        policy=MeasurementPolicy(),
        open_comparisons=(),
        allocator=None,
    )
    assert race_notes(SimpleNamespace(measurement=measurement)) == [
        "leader: fast, identified: no surviving plan can be faster than it by more than the "
        "1.02x indifference zone"
    ]


def test_the_gate_says_failed_only_when_its_interval_fell_below_the_bar(race_report):
    """An unresolved comparison is not a failed gate: the table and ``--candidate`` say
    which it is."""
    from dlopt.evidence.report import evolve_candidate
    from dlopt.vocabulary import Verdict

    mid = race_report.candidate("mid")
    for verdict, word in (
        (Verdict.NOT_FASTER, "failed"),
        (Verdict.UNRESOLVED, "unresolved"),
        (Verdict.DROPPED, "unresolved"),
        (None, "not passed"),
    ):
        cand = evolve_candidate(mid, measurement_verdict=verdict, confidence_gate_passed=False)
        assert gate_text(cand).split(" vs ")[0] == word, verdict
        assert dict(candidate_summary(cand))["confidence gate"] == gate_text(cand)
    passed = evolve_candidate(mid, confidence_gate_passed=True)
    assert gate_text(passed).startswith("passed vs ")
    assert gate_text(evolve_candidate(mid, confidence_gate_passed=None)) == "-"
