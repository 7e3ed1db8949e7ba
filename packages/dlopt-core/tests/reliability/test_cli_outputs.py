"""Fault class: outputs that cannot be written, found only after the race.

``dlopt select`` checks ``--report`` and ``--bundle`` before anything is built: a path
that cannot be written is a usage error (exit 2) naming it, never a lost race. The paths
used here fail for root too (permission bits do not stop root).
"""

from __future__ import annotations

import os

import pytest

from dlopt.api.optimizer import InferenceOptimizer
from dlopt.cli import cmd_select as cli_select
from dlopt.cli import main
from dlopt.cli.cmd_select import check_outputs
from dlopt.errors import ConfigurationError


@pytest.fixture
def nothing_is_built(monkeypatch):
    """Fail the test if the CLI gets as far as building a model or racing."""

    def too_far(*args, **kwargs):
        pytest.fail("the CLI built or raced before checking its outputs")

    monkeypatch.setattr(cli_select, "load_factory", too_far)
    monkeypatch.setattr(cli_select, "check_input_sizes", too_far)
    monkeypatch.setattr(InferenceOptimizer, "select", too_far)


def _select(*extra: str) -> int:
    return main(["select", "dlopt.testing.models:StructuredMLP", "--input", "1x16", *extra])


def _bad_paths(tmp_path):
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    a_dir = tmp_path / "a-dir"
    a_dir.mkdir()
    not_a_bundle = tmp_path / "not-a-bundle"
    not_a_bundle.mkdir()
    (not_a_bundle / "notes.txt").write_text("keep me")
    return a_file, a_dir, not_a_bundle


@pytest.mark.parametrize(
    ("option", "where", "message"),
    [
        ("--report", lambda a_file, a_dir, other: a_file / "sub" / "r.json", "is not a directory"),
        ("--report", lambda a_file, a_dir, other: a_dir, "is a directory"),
        ("--report", lambda a_file, a_dir, other: "/proc/dlopt-no-such/r.json", "not writable"),
        ("--report", lambda a_file, a_dir, other: "/dev/null", "not a regular file"),
        ("--bundle", lambda a_file, a_dir, other: a_file, "not a directory"),
        ("--bundle", lambda a_file, a_dir, other: other, "not a dlopt bundle"),
        ("--bundle", lambda a_file, a_dir, other: a_file / "bundle", "is not a directory"),
        ("--bundle", lambda a_file, a_dir, other: "/proc/dlopt-no-such/bundle", "not writable"),
    ],
)
def test_an_output_path_that_cannot_be_written_is_a_usage_error(
    tmp_path, capsys, nothing_is_built, option, where, message
):
    path = where(*_bad_paths(tmp_path))
    assert _select(option, str(path)) == 2
    err = capsys.readouterr().err
    assert f"{option} {path}" in err and message in err
    assert (tmp_path / "not-a-bundle" / "notes.txt").read_text() == "keep me"


def test_a_report_inside_the_bundle_is_a_usage_error(tmp_path, capsys, nothing_is_built):
    bundle = tmp_path / "bundle"
    assert _select("--bundle", str(bundle), "--report", str(bundle / "report.json")) == 2
    assert "inside --bundle" in capsys.readouterr().err


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root writes read-only directories"
)
def test_a_read_only_directory_is_a_usage_error(tmp_path, capsys, nothing_is_built):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        assert _select("--report", str(locked / "new" / "report.json")) == 2
        assert "not writable" in capsys.readouterr().err
    finally:
        locked.chmod(0o755)


def test_paths_that_can_be_written_pass_and_leave_nothing_behind(tmp_path):
    (tmp_path / "old-bundle").mkdir()
    (tmp_path / "old-bundle" / "manifest.json").write_text("{}")
    (tmp_path / "empty").mkdir()
    (tmp_path / "old.json").write_text("{}")
    for report, bundle in [
        (tmp_path / "new" / "deeper" / "report.json", tmp_path / "new" / "bundle"),
        (tmp_path / "old.json", tmp_path / "old-bundle"),
        (None, tmp_path / "empty"),
    ]:
        check_outputs(str(report) if report else None, str(bundle))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "old-bundle", "old.json"]
    with pytest.raises(ConfigurationError, match="--report"):
        check_outputs(str(tmp_path), None)
