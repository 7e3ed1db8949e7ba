"""The README's Python example, run as written on the demo model, serves whatever wins.

It races every installed plan (a few minutes), so it runs in the serving session
(``pytest -m serving``), with the end-to-end serving matrix.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dlopt.testing.fresh_process import run_script

pytestmark = pytest.mark.serving

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_readme_python_example_runs_as_written(tmp_path):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    example = next(block for block in blocks if "decision = optimizer.select(" in block)
    script = example + "\nprint('SERVED', tuple(y.shape))\n"
    proc = run_script(script, directory=tmp_path, name="example.py", timeout=1200)
    assert "SERVED (1, 10)" in proc.stdout
    assert (tmp_path / "artifacts" / "report.json").is_file()
