"""An isolated selection leaves nothing behind: no file in the temp directory, no process
a plan started, no unbounded copy of what a worker printed."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import faulty_plans
import pytest
from faulty_plans import (
    LAST_WORDS,
    NATIVE_LITTER,
    PIDS_FILE_ENV,
    LittersTempDirAndWins,
    PrintsWithoutEnd,
    StartsProcesses,
    StartsProcessesAndWins,
    WritesArtifacts,
    bounded,
    isolated_policy,
)

from dlopt import InferenceOptimizer
from dlopt.platform.processes import has_ended


@pytest.fixture
def private_tmpdir(tmp_path, monkeypatch) -> Path:
    """A temp directory of the test's own, for this process and every worker it starts."""
    directory = tmp_path / "tmp"
    directory.mkdir()
    monkeypatch.setenv("TMPDIR", str(directory))
    monkeypatch.setattr(tempfile, "tempdir", str(directory))
    return directory


def select(*providers, include: tuple[str, ...]):
    policy = isolated_policy(include=("eager_fp32", "fast", *include))
    with bounded(240):
        optimizer = InferenceOptimizer("cpu", policy, [faulty_plans.FastPlan(), *providers])
        return optimizer.select("faulty_plans:tiny_model")


def select_winner(plan):
    """An isolated selection of eager fp32 and ``plan``, which wins it (checked)."""
    policy = isolated_policy(include=("eager_fp32", plan.name))
    with bounded(240):
        decision = InferenceOptimizer("cpu", policy, [plan]).select("faulty_plans:tiny_model")
    assert decision.selected_plan == plan.name
    return decision


@pytest.mark.slow
def test_a_decision_closed_leaves_nothing_in_the_temp_directory(private_tmpdir):
    with select(WritesArtifacts(), include=("fast_artifact",)) as decision:
        assert decision.selected_plan in ("fast", "fast_artifact")
        assert decision.report.isolation is not None
    assert sorted(p.name for p in private_tmpdir.rglob("*")) == []


@pytest.mark.slow
def test_processes_a_plan_started_end_with_the_selection(tmp_path, monkeypatch):
    pids_file = tmp_path / "pids"
    monkeypatch.setenv(PIDS_FILE_ENV, str(pids_file))
    with select(StartsProcesses(), include=("starts_processes",)) as decision:
        report = decision.report
    pids = [int(line) for line in pids_file.read_text(encoding="utf-8").split()]
    assert len(pids) == 3  # its group's child, a setsid child and an orphaned daemon
    survivors = [pid for pid in pids if not has_ended(pid)]
    assert survivors == [], f"processes left running: {survivors}"
    assert report.isolation is not None and report.isolation.warnings == ()


@pytest.mark.slow
def test_processes_a_winning_plan_started_end_with_its_decision(tmp_path, monkeypatch):
    # The winner is built in the worker and again in the host: both sets of helpers end,
    # the host's when the decision is closed (``dlopt select`` closes it before it exits).
    pids_file = tmp_path / "pids"
    monkeypatch.setenv(PIDS_FILE_ENV, str(pids_file))
    with select_winner(StartsProcessesAndWins()):
        pids = [int(line) for line in pids_file.read_text(encoding="utf-8").split()]
        assert len(pids) == 6  # three in the worker, three in the host
        assert [pid for pid in pids[:3] if not has_ended(pid)] == []
        # The host's serve with the plan while the decision is open.
        assert [pid for pid in pids[3:] if has_ended(pid)] == []
    survivors = [pid for pid in pids if not has_ended(pid)]
    assert survivors == [], f"processes left running: {survivors}"


@pytest.mark.slow
def test_what_a_winning_plan_writes_to_the_temp_directory_goes_with_its_decision(
    private_tmpdir,
):
    # The worker writes into a temp directory inside its working directory; the host
    # brings the winner back with a temp directory of the decision's own.
    with select_winner(LittersTempDirAndWins()):
        # The host's litter is in the decision's own temp directory, beside its scratch.
        (own,) = [p for p in private_tmpdir.iterdir() if (p / NATIVE_LITTER).exists()]
        assert not (private_tmpdir / NATIVE_LITTER).exists()
        assert (own / NATIVE_LITTER).read_text(encoding="utf-8") == str(os.getpid())
        assert [p.name for p in own.glob("compile-cache-*")] != []
        assert os.environ.get("TMPDIR") == str(private_tmpdir)  # put back after the build
        assert tempfile.gettempdir() == str(private_tmpdir)
    assert sorted(p.name for p in private_tmpdir.rglob("*")) == []


@pytest.mark.slow
def test_what_a_worker_prints_is_kept_as_a_bounded_tail_shown_with_its_fault(private_tmpdir):
    with select(PrintsWithoutEnd(), include=("prints_without_end",)) as decision:
        fault = decision.report.candidate("prints_without_end").fault
    assert decision.selected_plan == "fast"
    assert fault is not None and fault.signal == "SIGSEGV"
    assert any(LAST_WORDS in line for line in fault.stderr)
    assert len(fault.stderr) <= 40 and all(len(line) <= 400 for line in fault.stderr)
    # The 16 MiB it printed went nowhere on disk.
    assert sorted(p.name for p in private_tmpdir.rglob("*")) == []


def test_the_output_tail_keeps_the_last_bytes_only():
    from dlopt.isolation.supervisor import OutputTail

    read_end, write_end = os.pipe()
    tail = OutputTail(read_end, limit=1000)
    with os.fdopen(write_end, "wb") as writer:
        for index in range(300):
            writer.write(f"line {index:04d}\n".encode())
    tail.close()
    assert len(tail.data()) == 1000
    assert tail.dropped == 300 * 10 - 1000
    assert tail.lines(2) == ("line 0298", "line 0299")
