"""A report written before the layout of ``dlopt`` by role still loads, and its JSON is
unchanged: the schema (version 2) did not move with the modules.

``data/report_schema2.json`` was written by dlopt at commit 26b6957 (the last before that
layout) with ``data/make_report_fixture.py``: a fake-clock selection with a selected,
a baseline, lost, unavailable and rejected plans.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from dlopt.evidence.report import SCHEMA_VERSION, load_report
from dlopt.pipeline.state import StageError
from dlopt.vocabulary import Stage, Status

DATA = Path(__file__).parent / "data"
FIXTURE = DATA / "report_schema2.json"


def _field_paths(value: object, path: str = "") -> set[str]:
    """Every key path of a JSON value, list items merged (``candidates[].name``)."""
    if isinstance(value, dict):
        found = set()
        for key, item in value.items():
            found |= {f"{path}.{key}"} | _field_paths(item, f"{path}.{key}")
        return found
    if isinstance(value, list):
        return set().union(*(_field_paths(item, f"{path}[]") for item in value))
    return set()


def test_a_report_written_before_loads_and_writes_back_byte_for_byte():
    text = FIXTURE.read_text(encoding="utf-8")
    report = load_report(FIXTURE)
    assert report.schema_version == SCHEMA_VERSION == 2
    assert report.to_json() + "\n" == text
    broken = report.candidate("broken_build")
    assert broken.status is Status.REJECTED
    assert isinstance(broken.error, StageError) and broken.error.stage is Stage.BUILD
    assert report.candidate("missing_sdk").status is Status.UNAVAILABLE


def test_a_report_written_now_has_the_same_fields(tmp_path):
    written = tmp_path / "report.json"
    subprocess.run(
        [sys.executable, str(DATA / "make_report_fixture.py"), str(written)],
        check=True,
        capture_output=True,
        cwd=tmp_path,
    )
    before = json.loads(FIXTURE.read_text(encoding="utf-8"))
    now = json.loads(written.read_text(encoding="utf-8"))
    # The runtime's lists (CUDA devices, plugins) depend on the machine: its own keys only.
    assert set(now["runtime"]) == set(before["runtime"])
    now["runtime"] = before["runtime"] = {}
    assert _field_paths(now) == _field_paths(before)
    assert [(c["name"], c["status"]) for c in now["candidates"]] == [
        (c["name"], c["status"]) for c in before["candidates"]
    ]
