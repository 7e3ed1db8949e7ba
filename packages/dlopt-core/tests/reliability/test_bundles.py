"""Fault class: torn and tampered bundles, and bundles that cannot be served here.

Concurrent writers, a reused directory, a file changed after writing, and permissions:
the bundle on disk is always one consistent bundle whose manifest hashes its files, the
reader refuses one whose files disagree, and files get the user's umask permissions.
Loading a bundle verifies it first, then serves it only through the plan's own provider
after a probe on this machine; a missing plugin, an unavailable provider, a provider
that cannot load and options that no longer fit are clear errors naming the plan.
"""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path

import attrs
import pytest
import torch
from attrs import frozen

from dlopt.api.bundles import load_bundle
from dlopt.bundle import store
from dlopt.bundle.store import BundleError, BundleLoadError, verify_bundle
from dlopt.contract.provider import BuiltPlan
from dlopt.engine.decision import OptimizationDecision
from dlopt.evidence.report import load_report
from dlopt.plugin import ProviderAvailability
from dlopt.plugins.discovery import PluginSettings, load_providers
from dlopt.testing.plugins import plugin_module


@pytest.fixture
def report(finished_report):
    return finished_report


def _decision(report, artifacts=None, plan=None):
    chosen = attrs.evolve(report, selected_plan=plan) if plan else report
    return OptimizationDecision(BuiltPlan(runner=lambda x: x, artifacts=artifacts or {}), chosen)


def _artifacts(tmp_path: Path, tag: str) -> dict[str, Path]:
    """One file and one directory artifact whose contents name ``tag``."""
    folder = tmp_path / f"src-{tag}"
    (folder / "engine" / "sub").mkdir(parents=True)
    (folder / f"{tag}.bin").write_bytes(tag.encode() * 100)
    (folder / "engine" / "sub" / "weights").write_bytes(tag.encode())
    (folder / "engine" / "config.json").write_text(json.dumps({"tag": tag}))
    return {"model": folder / f"{tag}.bin", "engine": folder / "engine"}


def test_manifest_hashes_the_report_and_every_artifact_file(report, tmp_path):
    bundle = _decision(report, _artifacts(tmp_path, "a")).save_bundle(tmp_path / "bundle")
    loaded = verify_bundle(bundle)
    assert loaded.report == report
    manifest = loaded.manifest
    assert manifest["report"] == "report.json" and len(manifest["report_sha256"]) == 64
    assert set(manifest["artifacts"]["engine"]["files"]) == {"config.json", "sub/weights"}
    assert loaded.artifact_path("model").read_bytes() == b"a" * 100
    assert verify_bundle(bundle).manifest == manifest


def test_reusing_a_directory_leaves_no_stale_artifacts(report, tmp_path):
    target = tmp_path / "bundle"
    _decision(report, _artifacts(tmp_path, "a")).save_bundle(target)
    _decision(report, {"model": _artifacts(tmp_path, "b")["model"]}, plan="eager_fp32").save_bundle(
        target
    )
    files = sorted(p.relative_to(target).as_posix() for p in target.rglob("*") if p.is_file())
    assert files == ["artifacts/eager_fp32/b.bin", "manifest.json", "report.json"]
    assert verify_bundle(target).report.selected_plan == "eager_fp32"
    # Nothing is left beside it either (no staging or old directories).
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle", "src-a", "src-b"]


def test_concurrent_saves_leave_one_consistent_bundle(report, tmp_path):
    target = tmp_path / "bundle"
    writers = [
        _decision(report, _artifacts(tmp_path, "a")),
        _decision(report, {"other": _artifacts(tmp_path, "b")["model"]}, plan="eager_fp32"),
    ]
    # A writer that fails breaks the barrier, so the other one stops too and the test
    # reports the error instead of waiting forever for its partner.
    start = threading.Barrier(len(writers), timeout=60)
    errors: list[BaseException] = []

    def save(decision: OptimizationDecision) -> None:
        try:
            for _ in range(15):
                start.wait()
                decision.save_bundle(target)
        except threading.BrokenBarrierError:
            pass  # the other writer failed: its error is the one reported
        except BaseException as exc:  # reported by the assert below
            errors.append(exc)
            start.abort()

    threads = [threading.Thread(target=save, args=(w,)) for w in writers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    loaded = verify_bundle(target)  # verifies every hash and that nothing else is there
    manifest = json.loads((target / "manifest.json").read_text())
    assert manifest["selected_plan"] == load_report(target / "report.json").selected_plan
    assert set(manifest["artifacts"]) == (
        {"model", "engine"} if loaded.report.selected_plan == "fast" else {"other"}
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle", "src-a", "src-b"]


@pytest.mark.parametrize("moment", ["destination check", "install"])
def test_a_bundle_another_writer_moves_away_mid_check_is_looked_at_again(
    report, tmp_path, monkeypatch, moment
):
    # Between seeing the earlier bundle and checking it, another writer renames it away
    # (to replace it with its own): the directory is gone, not "not a directory".
    target = tmp_path / "bundle"
    _decision(report, {"other": _artifacts(tmp_path, "b")["model"]}, plan="eager_fp32").save_bundle(
        target
    )
    real_check = store._check_replaceable
    # the destination check is the first look at the earlier bundle, the install the second
    moved_at_call = 1 if moment == "destination check" else 2
    calls = []

    def moved_away_first(root: Path) -> bool:
        calls.append(root)
        if len(calls) == moved_at_call:
            os.rename(root, tmp_path / "moved-by-the-other-writer")
        return real_check(root)

    monkeypatch.setattr(store, "_check_replaceable", moved_away_first)
    _decision(report, _artifacts(tmp_path, "a")).save_bundle(target)
    assert verify_bundle(target).report.selected_plan == report.selected_plan
    assert set(json.loads((target / "manifest.json").read_text())["artifacts"]) == {
        "model",
        "engine",
    }


def test_a_changed_report_fails_verification_naming_the_file(report, tmp_path):
    bundle = _decision(report).save_bundle(tmp_path / "bundle")
    text = (bundle / "report.json").read_text()
    (bundle / "report.json").write_text(text.replace('"fast"', '"eager_fp32"'))
    with pytest.raises(BundleError, match=r"report\.json does not match the SHA-256"):
        verify_bundle(bundle)


@pytest.mark.parametrize("victim", ["model", "engine"])
def test_a_changed_artifact_fails_verification_naming_the_file(report, tmp_path, victim):
    bundle = _decision(report, _artifacts(tmp_path, "a")).save_bundle(tmp_path / "bundle")
    path = verify_bundle(bundle).artifact_path(victim)
    if path.is_dir():
        path = path / "sub" / "weights"
    path.write_bytes(b"tampered")
    with pytest.raises(BundleError, match=rf"{path.name} does not match the SHA-256"):
        verify_bundle(bundle)


def test_a_file_added_to_a_bundle_or_removed_from_it_fails_verification(report, tmp_path):
    bundle = _decision(report, _artifacts(tmp_path, "a")).save_bundle(tmp_path / "bundle")
    extra = bundle / "artifacts" / "fast" / "engine" / "plugin.so"
    extra.write_bytes(b"\x7fELF")
    with pytest.raises(BundleError, match=r"plugin\.so is not listed"):
        verify_bundle(bundle)
    extra.unlink()
    (bundle / "artifacts" / "fast" / "a.bin").unlink()
    with pytest.raises(BundleError, match=r"a\.bin is missing"):
        verify_bundle(bundle)


def test_a_manifest_that_disagrees_with_the_report_is_refused(report, tmp_path):
    bundle = _decision(report).save_bundle(tmp_path / "bundle")
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["selected_plan"] = "eager_fp32"
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match=r"names plan 'eager_fp32'.*selected 'fast'"):
        verify_bundle(bundle)


def test_a_directory_that_is_not_a_bundle_is_never_replaced(report, tmp_path):
    target = tmp_path / "precious"
    target.mkdir()
    (target / "thesis.tex").write_text("years of work")
    with pytest.raises(BundleError, match="not a dlopt bundle"):
        _decision(report).save_bundle(target)
    assert (target / "thesis.tex").read_text() == "years of work"
    (tmp_path / "file").write_text("x")
    with pytest.raises(BundleError, match="not a directory"):
        _decision(report).save_bundle(tmp_path / "file")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert verify_bundle(_decision(report).save_bundle(empty)).report == report


def test_a_failed_save_keeps_the_earlier_bundle_and_leaves_nothing_behind(report, tmp_path):
    target = tmp_path / "bundle"
    _decision(report).save_bundle(target)
    broken = attrs.evolve(report, selected_plan="eager_fp32", candidates=())
    with pytest.raises(KeyError):
        _decision(broken).save_bundle(target)
    assert verify_bundle(target).report == report
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle"]


@pytest.fixture
def umask():
    def set_umask(value: int) -> None:
        os.umask(value)

    previous = os.umask(0o022)
    yield set_umask
    os.umask(previous)


@pytest.mark.parametrize("mask", [0o022, 0o027])
def test_report_and_bundle_files_follow_the_umask(report, tmp_path, umask, mask):
    umask(mask)
    source = tmp_path / "src" / "engine.bin"
    source.parent.mkdir()
    source.write_bytes(b"engine")
    source.chmod(0o600)  # the bundle's copy follows the umask, not the source's mode
    bundle = _decision(report, {"engine": source}).save_bundle(tmp_path / "bundle")
    report_path = _decision(report).save_report(tmp_path / "out" / "report.json")

    def mode(path: Path) -> int:
        return stat.S_IMODE(path.stat().st_mode)

    for path in (report_path, bundle / "report.json", bundle / "manifest.json"):
        assert mode(path) == 0o666 & ~mask, path
    assert mode(bundle / "artifacts" / "fast" / "engine.bin") == 0o666 & ~mask
    for folder in (bundle, bundle / "artifacts", bundle / "artifacts" / "fast"):
        assert mode(folder) == 0o777 & ~mask, folder


def test_a_bundle_with_a_symbolic_link_is_refused(report, tmp_path):
    bundle = _decision(report).save_bundle(tmp_path / "bundle")
    (bundle / "artifacts").mkdir(exist_ok=True)
    (bundle / "artifacts" / "link").symlink_to("/etc/passwd")
    with pytest.raises(BundleError, match="symbolic link"):
        verify_bundle(bundle)


# ----------------------------------------------------------------------------- loading


@frozen
class ScaleOptions:
    factor: float = attrs.field(default=1.0, metadata={"help": "multiplies the outputs"})


class LoadableFast:
    """Serves the plan ``fast`` again from its saved file: ``x * scale * factor``."""

    name = "fast"
    precision = "fp32"
    options_type = ScaleOptions

    def __init__(self, available: bool = True) -> None:
        self.available = available
        self.calls: list[tuple[str, object]] = []

    def probe(self, context):
        self.calls.append(("probe", context))
        if self.available:
            return ProviderAvailability.ok()
        return ProviderAvailability.unavailable("fake SDK missing", "pip install fake-sdk")

    def build(self, model, context):
        raise AssertionError("loading must not build")

    def load(self, directory, metadata, context):
        self.calls.append(("load", (directory, metadata, context)))
        scale = float((directory / "scale.txt").read_text())
        factor = context.options.factor
        return BuiltPlan(runner=lambda x: x * scale * factor, metadata=dict(metadata))


class CannotLoad(LoadableFast):
    load = None  # type: ignore[assignment]


def _owned(report, *, options=None):
    """``report`` whose selected plan ``fast`` comes from plugin ``fakeplug``."""
    candidates = tuple(
        attrs.evolve(
            c,
            plugin="fakeplug",
            distribution="dlopt-fake",
            version="1.0",
            options=options,
            metadata={"kind": "scaled"},
        )
        if c.name == "fast"
        else c
        for c in report.candidates
    )
    return attrs.evolve(report, candidates=candidates)


def _saved(report, tmp_path, *, options=None):
    source = tmp_path / "src" / "scale.txt"
    source.parent.mkdir()
    source.write_text("3")
    owned = _owned(report, options=options)
    return _decision(owned, {"scale": source}).save_bundle(tmp_path / "bundle")


def _refused_before_any_load(bundle: Path, error: type[Exception], match: str) -> None:
    """``load_bundle`` refuses ``bundle`` with ``error`` saying ``match``, before the
    plan's provider is asked to load anything."""
    provider = LoadableFast()
    with pytest.raises(error, match=match):
        load_bundle(bundle, registry=_registry(provider))
    assert provider.calls == []


def _registry(*providers):
    return load_providers(
        PluginSettings(autoload=False),
        extra_plugins=[("fakeplug", plugin_module("fakeplug", *providers))],
    )


def test_load_bundle_returns_a_ready_decision(report, tmp_path):
    bundle = _saved(report, tmp_path, options={"factor": 2.0})
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["provider"]["name"] == "fast"
    assert manifest["provider"]["plugin"] == "fakeplug"
    assert manifest["provider"]["options"] == {"factor": 2.0}
    provider = LoadableFast()
    decision = load_bundle(bundle, registry=_registry(provider))
    with decision:
        assert isinstance(decision, OptimizationDecision)
        assert decision.selected_plan == "fast"
        # the raced signature (4 x 16) goes to the loaded plan
        assert bool((decision(torch.ones(4, 16)) == 6.0).all())
    assert [kind for kind, _ in provider.calls] == ["probe", "load"]
    directory, metadata, context = provider.calls[1][1]
    assert directory == bundle / "artifacts" / "fast"
    assert metadata == {"kind": "scaled"}
    assert context.options == ScaleOptions(2.0)
    assert context.target == decision.report.target
    assert context.availability is not None and context.availability.available


def test_a_tampered_bundle_is_refused_before_any_probe_or_load(report, tmp_path):
    bundle = _saved(report, tmp_path)
    (bundle / "artifacts" / "fast" / "scale.txt").write_text("1000")
    _refused_before_any_load(bundle, BundleError, r"scale\.txt does not match the SHA-256")


def test_a_plan_whose_plugin_is_not_installed_names_the_distribution(report, tmp_path):
    bundle = _saved(report, tmp_path)
    with pytest.raises(BundleLoadError, match=r"'fast'.*pip install dlopt-fake"):
        load_bundle(bundle, registry=load_providers(PluginSettings(autoload=False)))


def test_an_unavailable_provider_is_reported_with_the_probe_reason(report, tmp_path):
    bundle = _saved(report, tmp_path)
    provider = LoadableFast(available=False)
    with pytest.raises(BundleLoadError) as info:
        load_bundle(bundle, registry=_registry(provider))
    message = str(info.value)
    assert "'fast'" in message and "dlopt-fake" in message
    assert "fake SDK missing" in message and "pip install fake-sdk" in message
    assert [kind for kind, _ in provider.calls] == ["probe"]


def test_a_plan_rebuilt_from_the_model_asks_for_the_model(report, tmp_path):
    bundle = _saved(report, tmp_path)
    with pytest.raises(BundleLoadError, match=r"'fast'.*rebuilding it from the model.*model=model"):
        load_bundle(bundle, registry=_registry(CannotLoad()))


class Rebuilt(CannotLoad):
    """Comes back by building again from the caller's model."""

    def build(self, model, context):
        self.calls.append(("build", context))
        factor = context.options.factor
        return BuiltPlan(runner=lambda x: model(x) * factor)


def test_a_plan_rebuilt_from_the_model_comes_back_with_it(report, tmp_path):
    bundle = _saved(report, tmp_path, options={"factor": 2.0})
    provider = Rebuilt()
    model = torch.nn.Identity()
    with load_bundle(bundle, registry=_registry(provider), model=model) as decision:
        assert bool((decision(torch.ones(4, 16)) == 2.0).all())
    assert [kind for kind, _ in provider.calls] == ["probe", "build"]


def test_recorded_options_that_no_longer_fit_are_refused_naming_the_plan(report, tmp_path):
    bundle = _saved(report, tmp_path, options={"factor": 2.0, "gone": True})
    _refused_before_any_load(bundle, BundleLoadError, r"'fast'.*gone")


def test_a_failing_load_is_reported_naming_the_plan_and_distribution(report, tmp_path):
    bundle = _saved(report, tmp_path)
    (bundle / "artifacts" / "fast" / "scale.txt").unlink()  # what load needs is gone
    manifest = json.loads((bundle / "manifest.json").read_text())
    del manifest["artifacts"]["scale"]
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(BundleLoadError, match=r"dlopt-fake could not load plan 'fast'"):
        load_bundle(bundle, registry=_registry(LoadableFast()))
