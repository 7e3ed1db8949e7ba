"""``dlopt.testing.fresh_process`` runs a script in a fresh interpreter and reads what it
reported."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlopt.testing.fresh_process import printed_result, run_script

SCRIPT = """
import json, os, sys
import torch
from dlopt.testing.models import SlowEagerNet
print("working")
outputs = SlowEagerNet(sleep_s=0)(torch.ones(1, 3, 8, 8))
result = {"args": sys.argv[1:], "cwd": os.getcwd(), "env": os.environ.get("FRESH_CHECK")}
print("RESULT " + json.dumps({**result, "outputs": outputs.shape[1]}))
"""


def test_the_script_runs_in_its_folder_with_its_arguments_and_environment(tmp_path: Path) -> None:
    proc = run_script(SCRIPT, "a", "b", directory=tmp_path, env={"FRESH_CHECK": "yes"})
    assert (tmp_path / "script.py").is_file()
    assert printed_result(proc) == {
        "args": ["a", "b"],
        "cwd": str(tmp_path),
        "env": "yes",
        "outputs": 16,
    }


def test_a_failing_script_fails_with_what_it_wrote_to_stderr(tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match=r"(?s)boom.py x exited with 1.*no such luck"):
        run_script("raise SystemExit('no such luck')", "x", directory=tmp_path, name="boom.py")


def test_a_script_that_reports_nothing_is_a_failure_showing_its_output(tmp_path: Path) -> None:
    proc = run_script("print('only this')", directory=tmp_path)
    with pytest.raises(AssertionError, match=r"(?s)printed no RESULT line.*only this"):
        printed_result(proc)
