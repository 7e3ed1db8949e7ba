"""``dlopt report`` of a demo-sized report fits 80 lines of a 120-column terminal: a plan's
notes (a "not built" reason runs to 300 characters) take one line, the plans unavailable
here one line per distribution; ``--candidate``, ``--plain`` and ``--json`` keep the whole
text."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable
from pathlib import Path

import attrs
import pytest

import dlopt.cli.cmd_report as cmd_report
from dlopt.cli import main
from dlopt.cli.console import Output
from dlopt.evidence.report import CandidateEvidence, evolve_candidate, load_report
from dlopt.vocabulary import Status

WIDTH, MOST_LINES = 120, 80
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _not_built(i: int) -> str:
    return (
        f"no time left: its build and first calls are expected to take {i}.8 s and the race "
        f"about 29.0 s, with 20.9 s of the 41 s budget left (its prior: 1.{i}4x [0.77, 4.17], "
        f"~13.6 s, table: avx2, conv models, 2{i} workload(s))"
    )


NOT_RACED = (
    "the race had 19.5 s left of the time budget, room for 3 plans (eager_fp32, "
    "openvino_cpu_int8, onnxruntime_cpu_int8); {name} was less promising (its prior: 2.08x "
    "[1.15, 5.70], ~1.3 s, table: avx2, conv models, 20 workload(s))"
)

#: Unavailable plans per distribution, as many as the demo has on an AVX2 CPU.
UNAVAILABLE = {"dlopt-core": 4, "dlopt-fx": 4, "dlopt-onnxruntime": 5, "dlopt-torchao": 8}
UNAVAILABLE |= {"dlopt-openvino": 3, "dlopt-tensorrt": 4}


def _blank(cand: CandidateEvidence, name: str, **changes: object) -> CandidateEvidence:
    return evolve_candidate(
        cand,
        name=name,
        error=None,
        cases=(),
        parity=None,
        latency_ms=None,
        speedup_vs_eager=None,
        measurement_verdict=None,
        confidence_gate_passed=None,
        **changes,
    )


@pytest.fixture(scope="module")
def demo_path(report_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real report grown to the demo's shape: 12 plans not built, 3 not raced and 28
    unavailable over 6 distributions, each with a reason as long as the demo's."""
    report = load_report(report_path)
    template = next(c for c in report.candidates if c.name != report.baseline)
    grown = [
        *(_blank(template, f"built_not_{i}", status=Status.NOT_BUILT, not_built=_not_built(i))
          for i in range(12)),
        *(_blank(template, f"raced_not_{i}", status=Status.LOST,
                 not_raced=NOT_RACED.format(name=f"raced_not_{i}")) for i in range(3)),
    ]  # fmt: skip
    for distribution, count in UNAVAILABLE.items():
        for i in range(count):
            name = f"{distribution.removeprefix('dlopt-')}_plan_{i}"
            grown.append(
                _blank(
                    template,
                    name,
                    status=Status.UNAVAILABLE,
                    distribution=distribution,
                    availability_reason=f"{name}: " + _not_built(i).replace("no time left", "no"),
                    install_hint=f"pip install {distribution} --extra-index-url "
                    "https://download.example.org/whl/cu126 (then restart the process)",
                )
            )
    demo = attrs.evolve(report, candidates=(*report.candidates, *grown))
    path = tmp_path_factory.mktemp("demo") / "demo.json"
    demo.save(path)
    return path


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> Callable[..., list[str]]:
    """Run ``dlopt report ARGS`` as on a colour terminal 120 columns wide (or ``width``);
    its lines, uncoloured."""
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")

    def run(argv: list[str], width: int = WIDTH) -> list[str]:
        screen = _Terminal()
        monkeypatch.setattr(cmd_report, "Output", lambda plain=None: Output(screen, width=width))
        assert main(["report", *argv]) == 0
        return _ANSI.sub("", screen.getvalue()).splitlines()

    return run


def test_the_demo_report_fits_80_lines_of_a_120_column_terminal(demo_path, terminal):
    lines = terminal([str(demo_path)])
    assert len(lines) <= MOST_LINES, "\n".join(lines)
    assert max(len(line.rstrip()) for line in lines) <= WIDTH
    report = load_report(demo_path)
    for cand in report.candidates:
        if cand.status == "not_built" or cand.not_raced:
            (row,) = [line for line in lines if f" {cand.name} " in line]
            assert row.rstrip().endswith("…"), row  # one line, cut short
    assert not any("workload(s))" in line for line in lines)  # no reason wraps on
    for distribution in UNAVAILABLE:
        count = sum(
            c.status == "unavailable" and c.distribution == distribution for c in report.candidates
        )
        (row,) = [line for line in lines if line.strip().startswith(distribution + " ")]
        assert f"{count} plans: " in row, row
    assert "--candidate PLAN" in "\n".join(lines)  # where the whole text is


def test_candidate_shows_the_whole_reason(demo_path, terminal):
    text = "".join("".join(terminal([str(demo_path), "--candidate", "built_not_3"])).split())
    assert "".join(f"not built: {_not_built(3)}".split()) in text


def test_plain_and_json_keep_every_reason_whole(demo_path, capsys):
    assert main(["report", str(demo_path), "--plain"]) == 0
    out = capsys.readouterr().out
    for i in range(12):
        assert f"not built: {_not_built(i)}" in out
    assert out.count("pip install dlopt-torchao --extra-index-url") == UNAVAILABLE["dlopt-torchao"]
    assert main(["report", str(demo_path), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    reasons = {c["name"]: c.get("not_built") for c in document["candidates"]}
    assert reasons["built_not_7"] == _not_built(7)


def test_a_report_that_fits_is_not_cut_and_says_nothing_of_it(report_path, terminal):
    wide = "\n".join(terminal([str(report_path)], width=400))
    assert "…" not in wide and "--candidate PLAN" not in wide
    assert "not applicable: channels-last needs" in wide
    narrow = "\n".join(terminal([str(report_path)], width=WIDTH))
    assert "…" in narrow and "--candidate PLAN" in narrow
