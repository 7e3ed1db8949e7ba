"""``dlopt.testing.fresh_process`` runs a script in a fresh interpreter and reads what it
reported; ``dlopt.testing.models.SlowEagerNet`` sleeps in eager calls only."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from dlopt.testing.fresh_process import printed_result, run_script
from dlopt.testing.models import SlowEagerNet

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


def test_the_slow_model_sleeps_in_eager_calls_on_contiguous_inputs_only(monkeypatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)
    model = SlowEagerNet(channels=16, convs=2, sleep_s=0.01, output="dict")
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        out = model(x)
        assert slept == [0.01] and out["logits"].shape == (2, 32)
        model(x.to(memory_format=torch.channels_last))
        torch.jit.trace(SlowEagerNet(), (x,), check_trace=False)
        torch.fx.symbolic_trace(SlowEagerNet())
    assert slept == [0.01]
    torch.testing.assert_close(SlowEagerNet(seed=3)(x), SlowEagerNet(seed=3)(x))
