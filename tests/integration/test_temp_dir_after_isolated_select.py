"""An isolated ``dlopt select`` that builds one plan of every compiling or exporting family
installed here (TorchInductor, ONNX Runtime, OpenVINO, TorchAO compiled, PT2E where the
CPU offers it) leaves nothing in ``$TMPDIR``: the worker writes into a temp directory
inside its working directory, and the host brings the winner back into a temp directory
of the decision's own, both removed before the command exits.

The model (``dlopt.testing.models.SlowEagerNet``) sleeps in eager calls only, so every
plan here beats eager and one of them is normally brought back into the host (what a
plan writes there is checked on its own in ``packages/dlopt-core/tests/isolation/test_leftovers.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

#: One plan per family that compiles, exports or imports an SDK writing temp files.
FAMILIES = {
    "dlopt_fx": "fx_inductor",
    "dlopt_onnxruntime": "onnxruntime_cpu",
    "dlopt_openvino": "openvino_cpu",
    "dlopt_torchao": "torchao_int8_weight_only_inductor",
}
PT2E = "torchao_pt2e_int8_static"


def test_an_isolated_select_leaves_the_temp_directory_as_it_found_it(tmp_path: Path) -> None:
    import importlib.util

    installed = [plan for module, plan in FAMILIES.items() if importlib.util.find_spec(module)]
    if len(installed) < 2:
        pytest.skip("fewer than two provider distributions that compile or export installed")
    plans = ["eager_fp32", *installed]
    if "torchao_int8_weight_only_inductor" in installed:
        plans.append(PT2E)  # built where the CPU has VNNI or AMX, else reported unavailable
    temp = tmp_path / "tmp"
    temp.mkdir()
    report_path = tmp_path / "report.json"
    argv = ["select", "dlopt.testing.models:SlowEagerNet", "--case", "x=2x3x8x8"]
    argv += [arg for plan in plans for arg in ("--include", plan)]
    argv += ["--all-plans", "--max-measure-time", "2", "--isolate", "--report", str(report_path)]
    env = {k: v for k, v in os.environ.items() if k not in ("TMP", "TEMP")}
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)  # Inductor's cache follows TMPDIR, as by default
    env.update(TMPDIR=str(temp), DLOPT_CACHE_DIR="")
    done = subprocess.run(
        [sys.executable, "-m", "dlopt", *argv],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,  # the test's own bound
    )
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(report_path.read_text(encoding="utf-8"))
    assert report["isolation"]["mode"] == "process"
    built = {c["name"] for c in report["candidates"] if c["error"] is None}
    assert set(installed) <= built, [(c["name"], c["error"]) for c in report["candidates"]]
    left = sorted(str(p.relative_to(temp)) for p in temp.rglob("*"))
    assert left == [], f"left in $TMPDIR: {left[:20]}"
