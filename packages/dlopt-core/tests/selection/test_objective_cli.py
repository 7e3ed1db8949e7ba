"""``dlopt select --objective`` from the command line: its bad combinations refused before
anything is built, the throughput curves in the terminal table, the saved report and the
HTML page, and the retired ``--strategy`` still working with a warning."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dlopt.api.optimizer import InferenceOptimizer
from dlopt.cli import main

MODEL = "dlopt.testing.models:StructuredMLP"


@pytest.fixture
def nothing_races(monkeypatch):
    """Fail the test if a selection starts: a refused combination must stop before."""

    def refuse(*args, **kwargs):
        pytest.fail("a selection started for a command that should have been refused")

    monkeypatch.setattr(InferenceOptimizer, "select", refuse)
    monkeypatch.setenv("DLOPT_DISABLE_PLUGIN_AUTOLOAD", "1")


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            ["--strategy", "max-throughput", "--objective", "lifecycle_latency"],
            "give --objective only: the deprecated --strategy max-throughput",
        ),
        (
            ["--max-latency-ms", "5", "--max-p99-latency-ms", "5"],
            "give one latency budget",
        ),
        (["--max-latency-ms", "0"], "--max-latency-ms 0.0: give a finite number > 0"),
        (["--max-p99-latency-ms", "nan"], "--max-p99-latency-ms nan: give a finite number"),
        (
            ["--objective", "max_throughput", "--batch-sizes", "1,2", "--max-batch-size", "8"],
            "give --batch-sizes or --max-batch-size, not both",
        ),
        (
            ["--objective", "max_throughput", "--batch-sizes", "1,x"],
            "write whole numbers joined by commas, e.g. 1,2,4,8",
        ),
        (["--objective", "max_throughput", "--batch-sizes", "1,0"], "0 is out of range"),
        (["--objective", "max_throughput", "--batch-sizes", "2,2"], "repeats a size"),
        (["--objective", "max_throughput", "--max-batch-size", "0"], "--max-batch-size 0: give"),
        (["--batch-sizes", "1,2"], "add --objective max_throughput"),
        (["--objective", "min_latency", "--max-batch-size", "8"], "add --objective max_throughput"),
    ],
)
def test_bad_combinations_are_usage_errors_before_anything_runs(
    arguments, message, capsys, nothing_races
):
    assert main(["select", MODEL, "--input", "1x16", *arguments]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


def test_max_throughput_needs_one_request_at_batch_1(capsys, nothing_races, tmp_path):
    base = ["select", MODEL, "--objective", "max_throughput"]
    assert main([*base, "--input", "4x16"]) == 2
    assert "ONE request, batch 1 along the first dimension (e.g. 1x16)" in capsys.readouterr().err
    # The retired --strategy max-throughput is the same objective, checked the same way.
    assert main(["select", MODEL, "--strategy", "max-throughput", "--input", "4x16"]) == 2
    assert "ONE request, batch 1 along the first dimension (e.g. 1x16)" in capsys.readouterr().err
    assert main([*base, "--case", "b1=1x16@1"]) == 2
    assert "give it as --input 1x... (batch 1), not --case" in capsys.readouterr().err
    # An inputs file of two signatures is not one request.
    inputs = tmp_path / "two.npz"
    np.savez(inputs, a=np.zeros((1, 16), np.float32), b=np.zeros((1, 16), np.float32))
    assert main([*base, "--inputs", str(inputs)]) == 2
    err = capsys.readouterr().err
    assert "races one request at several batch sizes" in err and "has 2 cases" in err


def _select_eager(report, objective: str, *arguments: str) -> int:
    """``dlopt select`` of the small MLP, one request of 1x16, eager fp32 alone."""
    return main(
        [
            "select",
            MODEL,
            "--input",
            "1x16",
            "--objective",
            objective,
            *arguments,
            "--include",
            "eager_fp32",
            "--report",
            str(report),
        ]
    )


def test_max_throughput_from_the_command_line_shows_and_saves_the_curves(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("DLOPT_DISABLE_PLUGIN_AUTOLOAD", "1")
    report = tmp_path / "r.json"
    code = _select_eager(
        report,
        "max_throughput",
        "--batch-sizes",
        "4,1",
        "--max-latency-ms",
        "1000",
        "--max-measure-time",
        "1",
        "--seed",
        "3",
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    out = captured.out
    assert "throughput per batch size, budget max_latency_ms 1000 ms" in out
    assert "within budget" in out and "items/s" in out
    data = json.loads(report.read_text(), parse_constant=lambda c: pytest.fail(c))
    assert data["objective"] == "max_throughput"
    assert data["constraints"]["max_latency_ms"] == 1000
    served = data["batch_size"]
    assert served in (1, 4)
    assert f"selected: eager_fp32 at batch {served} (baseline eager_fp32)" in out
    curve = data["throughput"]
    assert curve["batch_sizes"] == [1, 4] and curve["budget_met"] is True
    assert [(p["plan"], p["batch_size"]) for p in curve["points"]] == [
        ("eager_fp32", 1),
        ("eager_fp32", 4),
    ]
    assert (
        "one build, validated and raced at every batch size (1, 4)"
        in (curve["shapes"]["eager_fp32"])
    )

    # The saved report draws the same curves in the terminal and on the HTML page.
    assert main(["report", str(report), "--plain"]) == 0
    again = capsys.readouterr().out
    assert "throughput per batch size" in again and "#" in again
    page = tmp_path / "r.html"
    assert main(["report", str(report), "--html", str(page)]) == 0
    html = page.read_text()
    assert '<h2 id="throughput">Throughput per batch size</h2>' in html
    assert f"selected: eager_fp32 at batch {served}" in html
    assert "<svg" in html  # matplotlib (the [plots] extra) draws the curve figure too
    assert "Throughput</figcaption>" in html


def test_min_latency_from_the_command_line_races_batch_1(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("DLOPT_DISABLE_PLUGIN_AUTOLOAD", "1")
    report = tmp_path / "r.json"
    code = _select_eager(report, "min_latency", "--max-measure-time", "0.5")
    assert code == 0, capsys.readouterr().err
    data = json.loads(report.read_text())
    assert data["objective"] == "min_latency" and data["batch_size"] == 1
    assert "throughput" not in data


def test_the_retired_strategy_flag_still_selects_and_says_what_to_type(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("DLOPT_DISABLE_PLUGIN_AUTOLOAD", "1")
    report = tmp_path / "r.json"
    argv = ["select", MODEL, "--input", "1x16", "--strategy", "min-latency"]
    argv += ["--include", "eager_fp32", "--max-measure-time", "0.5", "--report", str(report)]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "--strategy is deprecated: use --objective min_latency" in err
    assert json.loads(report.read_text())["objective"] == "min_latency"
