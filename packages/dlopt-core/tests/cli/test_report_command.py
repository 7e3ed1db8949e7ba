"""``dlopt report`` (table, --json, --candidate, --html) and ``dlopt export`` on a real
report and on edge cases."""

from __future__ import annotations

import csv
import importlib.util
import json
from pathlib import Path

import attrs
import pytest

from dlopt.cli import main
from dlopt.evidence.report import evolve_candidate, load_report
from dlopt.vocabulary import Status

#: Figures need the optional [plots] extra; `nox -s tests` installs it, `tests-core` does not.
needs_plots = pytest.mark.skipif(
    importlib.util.find_spec("matplotlib") is None,
    reason='matplotlib is not installed (pip install "dlopt-core[plots]")',
)


def test_report_prints_the_table_decision_and_inputs(report_path, capsys):
    assert main(["report", str(report_path)]) == 0
    out = capsys.readouterr().out
    assert "inputs: random tensors of the given shapes" in out
    assert "native_bf16" in out and "native_channels_last" in out
    assert "not applicable: channels-last needs" in out
    assert "selected: " in out and "reason: " in out
    assert "measurement: " in out


def test_report_json_passes_the_file_through(report_path, capsys):
    assert main(["report", str(report_path), "--json"]) == 0
    assert capsys.readouterr().out == report_path.read_text()


def test_report_candidate_shows_its_evidence_per_case(report_path, capsys):
    # eager_fp32 is measured on every CPU (native_bf16 is unavailable without native bf16).
    assert main(["report", str(report_path), "--candidate", "eager_fp32"]) == 0
    out = capsys.readouterr().out
    assert "eager_fp32: latency per case" in out
    assert "eager_fp32: parity" in out
    lines = [line for line in out.splitlines() if line.startswith(("b1 ", "b4 "))]
    assert len(lines) >= 4  # both cases in the latency table and in the validation table


def test_an_unknown_candidate_is_a_usage_error_with_close_names(report_path, capsys):
    assert main(["report", str(report_path), "--candidate", "native_bf61"]) == 2
    assert "did you mean 'native_bf16'" in capsys.readouterr().err


@needs_plots
def test_report_html_writes_one_page(report_path, tmp_path, capsys):
    page = tmp_path / "r.html"
    assert main(["report", str(report_path), "--html", str(page)]) == 0
    assert f"html: {page}" in capsys.readouterr().out
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>") and "<svg" in text


def test_report_html_into_a_missing_directory_is_a_usage_error(report_path, tmp_path, capsys):
    target = tmp_path / "file"
    target.write_text("x")
    assert main(["report", str(report_path), "--html", str(target / "r.html")]) == 2
    assert "--html" in capsys.readouterr().err


@needs_plots
def test_export_writes_csv_latex_provenance_and_figures(report_path, tmp_path, capsys):
    out_dir = tmp_path / "paper"
    assert main(["export", str(report_path), str(report_path), "--output-dir", str(out_dir)]) == 0
    printed = capsys.readouterr().out
    for name in ("candidates.csv", "cases.csv", "samples.csv", "table.tex", "provenance.json"):
        assert f"wrote {out_dir / name}" in printed
    rows = list(csv.DictReader((out_dir / "candidates.csv").open()))
    assert {r["run"] for r in rows} == {"r", "r-2"}
    assert list((out_dir / "figures").glob("latency-*.svg"))
    provenance = json.loads((out_dir / "provenance.json").read_text())
    assert provenance["runs"][0]["seed"] == 3


def test_export_of_a_missing_report_is_a_usage_error(tmp_path, capsys):
    assert main(["export", str(tmp_path / "nope.json"), "-o", str(tmp_path / "x")]) == 2
    assert "no report at" in capsys.readouterr().err


def _edge(report_path: Path, tmp_path: Path) -> Path:
    """Every challenger failed, and the optional fields are gone."""
    report = load_report(report_path)
    candidates = tuple(
        c
        if c.name == report.baseline
        else evolve_candidate(c, status=Status.REJECTED, cases=(), parity=None, latency_ms=None)
        for c in report.candidates
    )
    edge = attrs.evolve(report, candidates=candidates, measurement=None)
    path = tmp_path / "edge.json"
    edge.save(path)
    return path


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--candidate", "native_bf16"],
        ["--html", "{tmp}/edge.html"],
    ],
)
def test_every_command_reads_an_edge_case(report_path, tmp_path, capsys, argv):
    path = _edge(report_path, tmp_path)
    args = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert main(["report", str(path), *args]) == 0, capsys.readouterr().err
    assert main(["export", str(path), "-o", str(tmp_path / "out")]) == 0
