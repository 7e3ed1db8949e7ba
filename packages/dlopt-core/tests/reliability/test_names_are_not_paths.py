"""Fault class: names that are paths. Plan and artifact names never leave their directory.

Plan names are checked where they enter (``register()``, explicit providers) and by
``ProviderContext.plan_dir``; artifact names and paths are checked after every build.
"""

from __future__ import annotations

import os

import pytest

from dlopt.contract.provider import BuiltPlan, ProviderContext
from dlopt.errors import ConfigurationError, ProviderBuildError
from dlopt.plugins.boundary import check_built_plan, check_plan_name, is_plain_name
from dlopt.plugins.discovery import PluginSettings, load_providers
from dlopt.testing import FakeProvider
from dlopt.testing.plugins import plugin_module

BAD_NAMES = ["../../x", "a/b", "a\\b", "..", ".", "", ".hidden", "-flag", "a..b", "x" * 101]


@pytest.mark.parametrize("name", [*BAD_NAMES, None, 3, "naïve", "a b", "a\x00b"])
def test_bad_plan_names_are_refused_with_a_clear_error(name):
    assert not is_plain_name(name)
    with pytest.raises(ConfigurationError, match=r"plugin 'npu'.*letters"):
        check_plan_name(name, plugin="npu")


@pytest.mark.parametrize("name", ["eager_fp32", "onnxruntime_cpu_int8", "npu-int8", "v2.1"])
def test_plain_names_pass(name):
    assert check_plan_name(name) == name


def test_every_installed_plan_name_is_plain():
    registry = load_providers(PluginSettings())
    assert registry.failures == []
    assert all(is_plain_name(info.name) for info in registry.providers)


def test_register_refuses_a_plan_named_like_a_path():
    plugin = plugin_module("pathy", FakeProvider("fine_plan"), FakeProvider("../../x"))
    registry = load_providers(PluginSettings(autoload=False), extra_plugins=[("pathy", plugin)])
    (failure,) = registry.failures
    assert failure.plugin == "pathy" and failure.stage == "register"
    assert "'../../x'" in failure.error
    names = {info.name for info in registry.providers}
    assert "fine_plan" not in names and "eager_fp32" in names


@pytest.mark.parametrize("name", ["../../x", "a/b", "..", ""])
def test_plan_dir_refuses_names_that_are_not_plain(tmp_path, name):
    context = ProviderContext(artifact_dir=tmp_path / "artifacts")
    with pytest.raises(ConfigurationError):
        context.plan_dir(name)
    assert sorted(p.name for p in tmp_path.iterdir()) in ([], ["artifacts"])


def test_plan_dir_refuses_a_plan_directory_that_links_outside(tmp_path):
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, artifacts / "linked")
    context = ProviderContext(artifact_dir=artifacts)
    with pytest.raises(ConfigurationError, match="outside"):
        context.plan_dir("linked")
    assert context.plan_dir("fine") == artifacts / "fine"


def _plan_with_artifacts(tmp_path, **artifacts):
    context = ProviderContext(artifact_dir=tmp_path / "artifacts")
    return context, BuiltPlan(lambda x: x, artifacts=artifacts)


def test_artifacts_inside_the_plan_dir_pass(tmp_path):
    context = ProviderContext(artifact_dir=tmp_path / "artifacts")
    engine = context.plan_dir("npu") / "engine.bin"
    engine.write_bytes(b"x")
    plan = BuiltPlan(lambda x: x, artifacts={"engine": str(engine), "model.onnx.data": engine})
    check_built_plan(plan, context, plan_name="npu", plugin="npu_plugin")
    assert plan.artifacts == {"engine": engine, "model.onnx.data": engine}


@pytest.mark.parametrize("name", ["../../../escaped", "a/b", "..", ""])
def test_artifact_names_that_are_paths_are_refused(tmp_path, name):
    context = ProviderContext(artifact_dir=tmp_path / "artifacts")
    engine = context.plan_dir("npu") / "engine.bin"
    plan = BuiltPlan(lambda x: x, artifacts={name: engine})
    with pytest.raises(ProviderBuildError, match=r"npu_plugin.*artifact name"):
        check_built_plan(plan, context, plan_name="npu", plugin="npu_plugin")


def test_artifact_paths_outside_the_plan_dir_are_refused(tmp_path):
    context = ProviderContext(artifact_dir=tmp_path / "artifacts")
    inside = context.plan_dir("npu")
    for path in (tmp_path / "elsewhere.bin", inside / ".." / "other" / "f", context.plan_dir("x")):
        plan = BuiltPlan(lambda x: x, artifacts={"engine": path})
        with pytest.raises(ProviderBuildError, match="outside"):
            check_built_plan(plan, context, plan_name="npu", plugin="npu_plugin")
    link = inside / "link"
    os.symlink(tmp_path, link)
    plan = BuiltPlan(lambda x: x, artifacts={"engine": link / "f"})
    with pytest.raises(ProviderBuildError, match="outside"):
        check_built_plan(plan, context, plan_name="npu", plugin="npu_plugin")


def test_artifact_paths_must_be_paths(tmp_path):
    context = ProviderContext(artifact_dir=tmp_path / "artifacts")
    plan = BuiltPlan(lambda x: x, artifacts={"engine": 42})
    with pytest.raises(ProviderBuildError, match="path"):
        check_built_plan(plan, context, plan_name="npu", plugin="npu_plugin")


class _ArtifactOutside(FakeProvider):
    """A plan that writes its artifact outside its plan directory."""

    def build(self, model, context):
        escaped = context.artifact_dir.parent / "escaped.bin"
        escaped.write_bytes(b"x")
        return BuiltPlan(runner=model, artifacts={"engine": escaped})


def test_a_race_rejects_a_plan_with_an_artifact_outside_its_directory_and_goes_on(
    race, x, tmp_path
):
    from dlopt.testing.models import StructuredMLP

    optimizer = race.optimizer(race.fake("eager_fp32", 2e-3), _ArtifactOutside("escaper"))
    optimizer.artifact_dir = tmp_path / "artifacts"
    decision = optimizer.select_signature(StructuredMLP(), x)
    evidence = decision.report.candidate("escaper")
    assert evidence.status == "rejected" and evidence.error.stage == "build"
    assert "outside the plan's directory" in evidence.error.message
    assert "'escaper'" in evidence.error.message and "'explicit'" in evidence.error.message
    decision.save_report(tmp_path / "report.json")


def test_an_explicit_provider_named_like_a_path_is_refused(race, x):
    from dlopt.testing.models import StructuredMLP

    optimizer = race.optimizer(race.fake("eager_fp32", 2e-3), race.fake("../../x", 1e-3))
    with pytest.raises(ConfigurationError, match=r"'\.\./\.\./x'.*not a plain name"):
        optimizer.select_signature(StructuredMLP(), x)
