"""Fault class: names that are paths, at the bundle writer and reader.

Whatever got past the checks where plugins register names, the bundle writer refuses a
plan or artifact name that would lead outside the bundle, and the reader refuses a
manifest that names a path outside it.
"""

from __future__ import annotations

import json

import attrs
import pytest

from dlopt.bundle.store import BundleError, verify_bundle
from dlopt.contract.provider import BuiltPlan
from dlopt.engine.decision import OptimizationDecision


@pytest.fixture
def report(finished_report):
    return finished_report


def _renamed(report, name):
    """``report`` whose selected plan is called ``name``."""
    candidates = tuple(
        attrs.evolve(c, name=name) if c.name == report.selected_plan else c
        for c in report.candidates
    )
    return attrs.evolve(report, selected_plan=name, candidates=candidates)


def _files(root):
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))


@pytest.mark.parametrize("name", ["../../x", "a/b", "..", "/abs", ".hidden", ""])
def test_a_selected_plan_name_that_is_a_path_is_refused(report, tmp_path, name):
    out = tmp_path / "deep" / "er"
    out.mkdir(parents=True)
    artifact = tmp_path / "model.bin"
    artifact.write_bytes(b"m")
    decision = OptimizationDecision(
        BuiltPlan(runner=lambda x: x, artifacts={"m": artifact}), _renamed(report, name)
    )
    with pytest.raises(BundleError, match="plain identifiers"):
        decision.save_bundle(out / "bundle")
    assert _files(tmp_path) == ["deep", "deep/er", "model.bin"]


def test_an_artifact_name_that_is_a_path_is_refused(report, tmp_path):
    first, second = tmp_path / "a" / "model.bin", tmp_path / "b" / "model.bin"
    for path in (first, second):
        path.parent.mkdir()
        path.write_bytes(b"m")
    # The second file's name is taken, so its artifact name would become a folder name.
    plan = BuiltPlan(runner=lambda x: x, artifacts={"ok": first, "../../../escaped": second})
    with pytest.raises(BundleError, match=r"'\.\./\.\./\.\./escaped' cannot name a bundle folder"):
        OptimizationDecision(plan, report).save_bundle(tmp_path / "out" / "bundle")
    assert _files(tmp_path) == ["a", "a/model.bin", "b", "b/model.bin", "out"]


@pytest.mark.parametrize("bad", ["../outside.json", "/etc/passwd", "artifacts/../../x", "."])
def test_a_manifest_naming_a_path_outside_the_bundle_is_refused(report, tmp_path, bad):
    artifact = tmp_path / "model.bin"
    artifact.write_bytes(b"m")
    bundle = OptimizationDecision(
        BuiltPlan(runner=lambda x: x, artifacts={"m": artifact}), report
    ).save_bundle(tmp_path / "bundle")
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["artifacts"]["m"]["path"] = bad
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match="outside the bundle"):
        verify_bundle(bundle)


def test_a_manifest_is_parsed_as_strict_json_only(report, tmp_path):
    bundle = OptimizationDecision(BuiltPlan(runner=lambda x: x), report).save_bundle(
        tmp_path / "bundle"
    )
    text = (bundle / "manifest.json").read_text()
    (bundle / "manifest.json").write_text(text.replace('"metadata": {', '"metadata": {"x": NaN,'))
    with pytest.raises(BundleError, match=r"manifest\.json is not a bundle manifest"):
        verify_bundle(bundle)
    (bundle / "manifest.json").write_text("[" * 100_000)
    with pytest.raises(BundleError, match="nested too deeply"):
        verify_bundle(bundle)
