"""Run a Python script in a fresh interpreter, as a serving process or a second run would.

What a test checks across processes (a plan cache hit, a bundle loaded on a machine that
never saw the race, an example run as written) runs as a script of its own: it is written
into a folder, run there with this interpreter, and it reports by printing one line::

    print("RESULT " + json.dumps(result))

which :func:`printed_result` reads: ``printed_result(run_script(SCRIPT, *args,
directory=tmp_path))``. A script that exits with an error fails the test
with the end of what it wrote to stderr. The script imports what it needs by name
(``from dlopt.testing.models import SlowEagerNet``): nothing is pickled across.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: How a script's result line begins.
RESULT_PREFIX = "RESULT "


def run_script(
    script: str,
    *args: str,
    directory: Path,
    name: str = "script.py",
    env: Mapping[str, str] | None = None,
    timeout: float = 600,
) -> subprocess.CompletedProcess[str]:
    """Run the Python source ``script`` as ``directory / name`` in a fresh interpreter,
    with ``directory`` as its working directory, ``args`` as its arguments and ``env``
    added to this process's environment.

    Raises ``AssertionError`` with the last 4000 characters of its stderr when it exits
    with an error, ``subprocess.TimeoutExpired`` after ``timeout`` seconds.
    """
    path = Path(directory) / name
    path.write_text(script, encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, str(path), *args],
        cwd=directory,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=timeout,
        check=False,
    )
    if proc.returncode != 0:
        raise AssertionError(
            f"{name} {' '.join(args)} exited with {proc.returncode}:\n{proc.stderr[-4000:]}"
        )
    return proc


def printed_result(proc: subprocess.CompletedProcess[str]) -> Any:
    """The JSON value a script run by :func:`run_script` printed on its line that begins
    with ``"RESULT "`` (``AssertionError`` with its output when it printed none)."""
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT_PREFIX):
            return json.loads(line.removeprefix(RESULT_PREFIX))
    raise AssertionError(
        f"{proc.args[1]} printed no {RESULT_PREFIX.strip()} line:\n"
        f"{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    )
