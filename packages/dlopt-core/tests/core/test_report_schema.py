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

#: Optional fields schema 2 gained after the fixture was written, each with a default a
#: report without it loads with. A new field goes here (and in docs/reports.md); renaming
#: or removing one is a schema change, which needs a new version and a loader for 2.
ADDED_SINCE_FIXTURE = {
    "candidates[]": (
        "measurement_note",
        "eliminated_by",
        "elimination_speedup",
        "prior",
        "not_built",
        "round_spread",
    ),
    # Top-level fields, written only when set (``batch_size``, ``serving`` and
    # ``decision_time`` are set by every new report).
    "": ("batch_size", "serving", "decision_time"),
}


def _without_added(data: dict) -> dict:
    """``data`` (a report as JSON) without the fields added since the fixture."""
    for key in ADDED_SINCE_FIXTURE["candidates[]"]:
        for cand in data["candidates"]:
            cand.pop(key, None)
    for key in ADDED_SINCE_FIXTURE[""]:
        data.pop(key, None)
    return data


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
    rewritten = json.loads(report.to_json())
    # Nothing it held changed: the fields added since load with their defaults only.
    for cand in rewritten["candidates"]:
        assert all(cand.get(key) is None for key in ADDED_SINCE_FIXTURE["candidates[]"])
    assert json.dumps(_without_added(rewritten), indent=2) + "\n" == text
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
    added = {f".candidates[].{key}" for key in ADDED_SINCE_FIXTURE["candidates[]"]}
    added |= {f".{key}" for key in ADDED_SINCE_FIXTURE[""]}
    # A field added since, and everything inside it.
    kept = {p for p in _field_paths(now) if not any(p == a or p.startswith(a + ".") for a in added)}
    assert kept == _field_paths(before)
    assert [(c["name"], c["status"]) for c in now["candidates"]] == [
        (c["name"], c["status"]) for c in before["candidates"]
    ]


def test_every_evidence_figure_has_exactly_one_report_field():
    import attrs

    from dlopt.evidence.report import CANDIDATE_JSON_LAYOUT, CandidateEvidence

    places = [(group, attr) for _, group, attr in CANDIDATE_JSON_LAYOUT]
    keys = [key for key, _, _ in CANDIDATE_JSON_LAYOUT]
    assert len(set(keys)) == len(keys) and len(set(places)) == len(places)
    expected = set()
    for top in attrs.fields(attrs.resolve_types(CandidateEvidence)):
        if isinstance(top.type, type) and attrs.has(top.type):
            expected |= {(top.name, f.name) for f in attrs.fields(top.type)}
        else:
            expected.add((None, top.name))
    assert set(places) == expected


def test_grouped_figures_read_and_change_under_their_report_names():
    from dlopt.evidence.report import evolve_candidate

    report = load_report(FIXTURE)
    cand = report.candidate("fast")
    assert cand.latency_ms == cand.latency.median_ms is not None
    assert cand.parity is cand.validation.first_calls  # the report field name reads too
    changed = evolve_candidate(cand, latency_ms=1.5, status=Status.LOST, parity=None)
    assert changed.latency.median_ms == 1.5 and changed.latency.p99_ms == cand.latency.p99_ms
    assert changed.status is Status.LOST and changed.validation.first_calls is None
    assert changed.validation.final_check == cand.validation.final_check
