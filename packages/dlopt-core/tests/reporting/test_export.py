"""CSV (candidate and case level, every raw sample), the LaTeX fragment, provenance."""

from __future__ import annotations

import builtins
import csv
import importlib.util
import io
import json
import re

import pytest

from dlopt.reporting.export import (
    CANDIDATE_FIELDS,
    SAMPLE_FIELDS,
    candidate_records,
    export,
    latex_escape,
    latex_table,
    provenance,
    sample_records,
    to_csv,
)
from dlopt.reporting.labels import label_runs

#: Figures need the optional [plots] extra; `nox -s tests` installs it, `tests-core` does not.
needs_plots = pytest.mark.skipif(
    importlib.util.find_spec("matplotlib") is None,
    reason='matplotlib is not installed (pip install "dlopt-core[plots]")',
)


def _read(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def test_raw_samples_round_trip_through_csv_exactly(sampled_report):
    report = sampled_report
    runs = label_runs([report], ["runs/first.json"])
    rows = _read(to_csv(SAMPLE_FIELDS, sample_records(runs)))
    expected = [
        (c.name, case.name, value)
        for c in report.candidates
        for case in c.cases
        if case.latency is not None
        for value in case.latency.samples_ms
    ]
    assert len(rows) == len(expected) > 0
    assert [(r["plan"], r["case"], float(r["latency_ms"])) for r in rows] == expected
    assert {r["run"] for r in rows} == {"first"}


def test_candidate_csv_reads_back_the_report_numbers(race_report):
    runs = label_runs([race_report])
    rows = {r["plan"]: r for r in _read(to_csv(CANDIDATE_FIELDS, candidate_records(runs)))}
    for cand in race_report.candidates:
        row = rows[cand.name]
        if cand.latency_ms is None:
            assert row["median_ms"] == ""
        else:
            assert float(row["median_ms"]) == cand.latency_ms
        assert row["status"] == str(cand.status)
    assert rows["broken"]["error_stage"] == "build"
    assert rows["nosdk"]["availability_reason"] == "fake SDK missing"


def test_several_reports_become_a_column_per_run(race_report, lifecycle_report):
    runs = label_runs([race_report, lifecycle_report, race_report], ["a/r.json", "b/r.json", None])
    assert [run.label for run in runs] == ["r", "r-2", "run-3"]
    tex = latex_table(runs)
    header = next(line for line in tex.splitlines() if line.startswith("Plan"))
    assert header.count("&") == 1 + len(runs)
    assert "r-2" in header and "run-3" in header


def _check_tabular(tex: str) -> None:
    """A syntax check: one tabular, balanced braces and math, every row as wide as the
    column spec, every row ended by ``\\\\``."""
    body = [line for line in tex.splitlines() if line and not line.startswith("%")]
    assert body[0].startswith(r"\begin{tabular}{") and body[-1] == r"\end{tabular}"
    spec = re.match(r"\\begin\{tabular\}\{([lcr]+)\}", body[0])
    assert spec, body[0]
    columns = len(spec.group(1))
    unescaped = re.sub(r"\\[&%$#_{}]", "", tex)
    assert unescaped.count("{") == unescaped.count("}")
    for line in body[1:-1]:
        if line in (r"\toprule", r"\midrule", r"\bottomrule"):
            continue
        assert line.endswith(r" \\"), line
        cells = re.sub(r"\\&", "", line).count("&") + 1
        assert cells == columns, line
        assert re.sub(r"\\\$", "", line).count("$") % 2 == 0, line


@pytest.mark.parametrize("several", [False, True])
def test_the_latex_fragment_parses_as_a_table(race_report, lifecycle_report, several):
    reports = [race_report, lifecycle_report] if several else [race_report]
    tex = latex_table(label_runs(reports))
    _check_tabular(tex)
    assert r"eager\_fp32" in tex and r"$\star$" in tex


def test_latex_escapes_specials():
    assert latex_escape("a_b & 50% #1 {x} ~^\\") == (
        r"a\_b \& 50\% \#1 \{x\} \textasciitilde{}\textasciicircum{}\textbackslash{}"
    )


def test_provenance_names_versions_device_policy_seed_and_tolerances(race_report):
    (run,) = label_runs([race_report], ["r.json"])
    record = provenance([run])["runs"][0]
    assert record["dlopt_version"] == race_report.dlopt_version
    assert record["runtime"]["torch"] == race_report.runtime.torch
    assert "isa_flags" in record["runtime"]["cpu"]
    assert record["seed"] == race_report.measurement.seed
    assert record["measurement_policy"]["max_time_s"] == race_report.measurement.policy.max_time_s
    assert record["quality_tolerances"] == race_report.quality
    assert record["inputs"] == "random tensors of the given shapes"


@needs_plots
def test_export_writes_the_bundle(tmp_path, race_report, lifecycle_report):
    result = export(label_runs([race_report, lifecycle_report], ["r.json", "l.json"]), tmp_path)
    names = {p.relative_to(tmp_path).as_posix() for p in result.files}
    assert {"candidates.csv", "cases.csv", "samples.csv", "table.tex", "provenance.json"} <= names
    assert {"figures/latency-r.svg", "figures/speedup-r.svg", "figures/lifecycle-l.svg"} <= names
    assert result.figures_missing is None
    json.loads((tmp_path / "provenance.json").read_text(), parse_constant=pytest.fail)
    cases = _read((tmp_path / "cases.csv").read_text())
    assert {(r["run"], r["case"]) for r in cases} >= {("r", "b1"), ("r", "b4"), ("l", "b1")}


def test_without_matplotlib_everything_but_figures_is_written(tmp_path, monkeypatch, race_report):
    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    result = export(label_runs([race_report]), tmp_path)
    assert result.figures_missing is not None
    assert 'pip install "dlopt-core[plots]"' in result.figures_missing
    assert (tmp_path / "candidates.csv").is_file() and (tmp_path / "table.tex").is_file()
    assert not (tmp_path / "figures").exists()
