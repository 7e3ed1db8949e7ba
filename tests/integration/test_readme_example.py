"""The README's Python example, run as written on the demo model, serves whatever wins.

It races every installed plan (a few minutes), so it runs in the serving session
(``pytest -m serving``), with the end-to-end serving matrix.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.serving

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_readme_python_example_runs_as_written(tmp_path):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    example = next(block for block in blocks if "decision = optimizer.select(" in block)
    (tmp_path / "example.py").write_text(example + "\nprint('SERVED', tuple(y.shape))\n")
    proc = subprocess.run(
        [sys.executable, "example.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "SERVED (1, 10)" in proc.stdout
    assert (tmp_path / "artifacts" / "report.json").is_file()
