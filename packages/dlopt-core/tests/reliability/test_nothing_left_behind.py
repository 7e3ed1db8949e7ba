"""Nothing left behind: the temporary artifact directory a selection makes belongs to its
decision and is removed when the decision is closed, garbage-collected or the
interpreter exits; a directory the user named (``artifact_dir``/``--artifacts``) and a
saved bundle are kept."""

from __future__ import annotations

import gc
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

from dlopt.cli import main
from dlopt.settings.workload import WorkloadCase
from dlopt.testing.models import StructuredMLP


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The system temp directory, made private to this test."""
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    monkeypatch.setenv("TMPDIR", str(root))
    return root


def _select(race, x):
    return race.optimizer(race.fake("eager_fp32", 2e-3), race.fake("fast", 1e-3)).select_signature(
        StructuredMLP(), x
    )


def test_closing_the_decision_removes_its_artifact_directory(race, x, private_tmp):
    decision = _select(race, x)
    scratch = decision.artifact_dir
    assert scratch is not None and scratch.parent == private_tmp and scratch.is_dir()
    decision.close()
    assert not scratch.exists() and decision.artifact_dir is None
    assert list(private_tmp.iterdir()) == []


def test_the_context_manager_releases_it_deterministically(race, x, private_tmp):
    with _select(race, x) as decision:
        scratch = decision.artifact_dir
        assert scratch is not None and scratch.is_dir()  # alive while the decision is
    assert not scratch.exists()
    assert list(private_tmp.iterdir()) == []


def test_a_forgotten_decision_removes_it_when_collected(race, x, private_tmp):
    decision = _select(race, x)
    scratch = decision.artifact_dir
    assert scratch is not None and scratch.is_dir()
    del decision
    gc.collect()
    assert not scratch.exists()


def test_a_failed_selection_leaves_nothing(race, x, private_tmp):
    from dlopt.errors import SelectionCancelled

    optimizer = race.optimizer(race.fake("eager_fp32", 2e-3))
    with pytest.raises(SelectionCancelled):
        optimizer.select(
            StructuredMLP(),
            [WorkloadCase("c", args=(x,))],
            should_continue=lambda: False,
        )
    assert list(private_tmp.iterdir()) == []


def test_a_reference_that_cannot_serve_leaves_nothing(race, x, private_tmp):
    from dlopt.errors import ReferenceCheckError

    class Fails(torch.nn.Module):
        def forward(self, t):
            raise RuntimeError("broken model")

    with pytest.raises(ReferenceCheckError, match="broken model"):
        race.optimizer(race.fake("eager_fp32", 2e-3)).select_signature(Fails().eval(), x)
    assert list(private_tmp.iterdir()) == []


def test_a_named_artifact_dir_and_a_saved_bundle_are_kept(race, x, private_tmp, tmp_path):
    named = tmp_path / "mine"
    optimizer = race.optimizer(race.fake("eager_fp32", 2e-3), race.fake("fast", 1e-3))
    optimizer.artifact_dir = named
    (named / "keep.txt").parent.mkdir()
    (named / "keep.txt").write_text("mine")
    with optimizer.select_signature(StructuredMLP(), x) as decision:
        assert decision.artifact_dir is None  # the caller owns it
        bundle = decision.save_bundle(tmp_path / "bundle")
    assert (named / "keep.txt").read_text() == "mine"
    assert (bundle / "manifest.json").is_file()
    assert list(private_tmp.iterdir()) == []


def test_the_directory_goes_at_interpreter_exit(tmp_path):
    """A script that never closes its decision still leaves nothing at exit."""
    root = tmp_path / "tmp"
    root.mkdir()
    script = (
        "import torch\n"
        "from dlopt.testing.fake_race import FakeRace\n"
        "from dlopt.testing.models import StructuredMLP\n"
        "race = FakeRace()\n"
        "kept = race.optimizer(race.fake('eager_fp32', 2e-3)).select_signature(\n"
        "    StructuredMLP(), torch.randn(2, 16))\n"
        "print(kept.artifact_dir)\n"
    )
    env = {"TMPDIR": str(root), "DLOPT_DISABLE_PLUGIN_AUTOLOAD": "1", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith(str(root))
    assert list(root.iterdir()) == []


def test_select_twice_leaves_no_new_directory_in_the_temp_dir(
    private_tmp, tmp_path, monkeypatch, select_argv
):
    monkeypatch.setenv("DLOPT_DISABLE_PLUGIN_AUTOLOAD", "1")
    # native_channels_last is rejected at build: only eager races, quickly.
    argv = select_argv("b1=1x16", extra=["--report", str(tmp_path / "r.json")])
    before = sorted(private_tmp.iterdir())
    for _ in range(2):
        assert main(argv) == 0
        assert sorted(private_tmp.iterdir()) == before
    assert (tmp_path / "r.json").is_file()
