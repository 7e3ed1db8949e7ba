"""dlopt's own failure in the isolated worker ends the selection at once: one line naming
it, the traceback in a log, no plugin blamed and no worker restarted."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

#: A model module that, imported in the worker, makes dlopt's own selection code raise
#: (the factory runs there too: that is where the failure has to happen).
MODULE = textwrap.dedent(
    """
    import torch
    import dlopt.engine.select as select


    def broken(*args, **kwargs):
        raise OverflowError("cannot convert float infinity to integer")


    select._plan_the_time = broken


    def build():
        return torch.nn.Linear(4, 2).eval()
    """
)


def test_an_exception_in_dlopt_ends_the_isolated_selection_with_one_line(tmp_path):
    (tmp_path / "broken_dlopt.py").write_text(MODULE, encoding="utf-8")
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
        DLOPT_USER_CACHE_DIR=str(tmp_path / "user-cache"),
    )
    result = subprocess.run(
        [sys.executable, "-m", "dlopt", "select", "broken_dlopt:build", "--input", "1x4",
         "--include", "eager_fp32", "--isolate"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert result.returncode != 0
    errors = [line for line in result.stderr.splitlines() if line.startswith("dlopt: error:")]
    assert len(errors) == 1, result.stderr[-2000:]
    line = errors[0]
    assert "dlopt's own code failed in the isolated worker" in line
    assert "OverflowError: cannot convert float infinity to integer" in line
    assert "not in a plugin" in line and "plugin:dlopt.builtin" not in result.stderr
    assert "lost" not in result.stderr and "Traceback" not in result.stderr
    logs = list((tmp_path / "user-cache" / "logs").glob("isolated-*.log"))
    assert len(logs) == 1 and str(logs[0]) in line
    assert "OverflowError" in logs[0].read_text() and "_plan_the_time" in logs[0].read_text()
