"""The provider's own behaviour: each probe layer's answer, options, and what load refuses."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import attrs
import pytest
import tinynpu
import torch
from dlopt_example_npu import provider as npu
from dlopt_example_npu.provider import (
    ExampleNpuFastProvider,
    ExampleNpuProvider,
    FastNpuOptions,
    NpuOptions,
)

from dlopt.plugin import (
    ConfigurationError,
    ExecutionTarget,
    PreparedCase,
    ProviderAvailability,
    ProviderBuildError,
    ProviderContext,
)
from dlopt.settings.policy import describe_options, structure_options


class SmallNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.bn = torch.nn.BatchNorm2d(4)
        self.eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.conv(x)).mean(dim=(2, 3))


def _context(tmp_path: Path, model: torch.nn.Module, **kwargs: object) -> ProviderContext:
    x = torch.randn(2, 3, 8, 8)
    with torch.inference_mode():
        cases = (PreparedCase("batch-2", (x,), {}, model(x)),)
    return ProviderContext(artifact_dir=tmp_path / "artifacts", cases=cases, **kwargs)  # type: ignore[arg-type]


# -- probe: one test per layer --------------------------------------------------------
def _probe(tmp_path: Path, target: ExecutionTarget | None = None) -> ProviderAvailability:
    context = ProviderContext(target or ExecutionTarget("cpu"), artifact_dir=tmp_path)
    return ExampleNpuProvider().probe(context)


def _refusal(availability: ProviderAvailability) -> tuple[str, str]:
    """The reason and install hint of an unavailable plan."""
    assert not availability.available
    assert availability.reason and availability.install_hint
    return availability.reason, availability.install_hint


def test_available_probe_reports_versions_and_the_device(tmp_path: Path) -> None:
    availability = _probe(tmp_path)
    assert availability.available, availability.reason
    assert availability.sdk_versions["tinynpu"] == tinynpu.__version__
    assert availability.details["device"] == "tinynpu0"


def test_layer_1_distribution_not_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(npu, "SDK_DISTRIBUTION", "tinynpu-sdk-not-installed")
    reason, hint = _refusal(_probe(tmp_path))
    assert "tinynpu-sdk-not-installed is not installed" in reason
    assert hint == npu.INSTALL_HINT


def test_layer_2_sdk_version_outside_the_supported_range(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tinynpu, "__version__", "2.0.0")
    reason, _ = _refusal(_probe(tmp_path))
    assert "tinynpu 2.0.0" in reason and npu.SDK_VERSIONS in reason


def test_layer_3_no_visible_device(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(tinynpu.VISIBLE_DEVICES_ENV, "")
    reason, hint = _refusal(_probe(tmp_path))
    assert "tinynpu device 0 is not visible (visible: none" in reason
    assert tinynpu.VISIBLE_DEVICES_ENV in hint


def test_the_host_side_npu_target_picks_its_device(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(tinynpu.VISIBLE_DEVICES_ENV, "0,1")
    target = ExecutionTarget("tinynpu:1", host="cpu")
    availability = _probe(tmp_path, target)
    assert availability.available, availability.reason
    assert availability.details["device"] == "tinynpu1"
    model = SmallNet()
    context = attrs.evolve(_context(tmp_path, model), target=target)
    with ExampleNpuProvider().build(model, context) as plan:
        assert plan.runner.device.info.name == "tinynpu1"


def test_layer_3_a_device_that_does_not_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def silent(index: int = 0, timeout_s: float = 2.0) -> float:
        raise tinynpu.NpuError(f"tinynpu{index} did not answer within {timeout_s} s")

    monkeypatch.setattr(tinynpu, "ping", silent)
    reason, hint = _refusal(_probe(tmp_path))
    assert "did not answer" in reason
    assert hint == npu.INSTALL_HINT


@pytest.mark.parametrize(
    ("target", "reason"),
    [
        (ExecutionTarget("cuda"), "tinynpu takes host tensors"),
        (ExecutionTarget("npu:0", host="cpu"), "compute on a tinynpu device, not on 'npu:0'"),
    ],
)
def test_targets_the_sdk_cannot_serve(tmp_path: Path, target: ExecutionTarget, reason: str) -> None:
    said, hint = _refusal(_probe(tmp_path, target))
    assert reason in said
    assert "--device tinynpu:0 --host cpu" in hint


# -- options ------------------------------------------------------------------------
def test_options_are_described_with_help() -> None:
    described = {o.name: o for o in describe_options(FastNpuOptions)}
    assert list(described) == ["worker_threads", "queue_depth", "optimize_numerics"]
    assert all(o.help for o in described.values())
    assert described["worker_threads"].default == 1


def test_bad_options_are_configuration_errors() -> None:
    with pytest.raises(ConfigurationError, match="worker_threads must be at least 1"):
        structure_options(NpuOptions, {"worker_threads": 0}, plan="examplenpu_fp32")
    with pytest.raises(ConfigurationError, match="no option 'optimize_numerics'"):
        structure_options(NpuOptions, {"optimize_numerics": False}, plan="examplenpu_fp32")


def test_options_reach_the_device(tmp_path: Path) -> None:
    model = SmallNet()
    options = FastNpuOptions(worker_threads=2, optimize_numerics=False)
    with ExampleNpuFastProvider().build(model, _context(tmp_path, model, options=options)) as plan:
        assert plan.runner.device.worker_threads == 2
        assert plan.metadata["options"] == {
            "worker_threads": 2,
            "queue_depth": 16,
            "optimize_numerics": False,
        }


# -- build and load -----------------------------------------------------------------
def test_build_needs_the_prepared_cases(tmp_path: Path) -> None:
    with pytest.raises(ProviderBuildError, match=r"context\.cases"):
        ExampleNpuProvider().build(SmallNet(), ProviderContext(artifact_dir=tmp_path))


def test_a_model_the_sdk_cannot_compile_is_a_clear_build_error(tmp_path: Path) -> None:
    class ReturnsText(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> str:
            return "not a tensor"

    model = ReturnsText()
    x = torch.randn(1, 3)
    context = ProviderContext(
        artifact_dir=tmp_path, cases=(PreparedCase("c", (x,), {}, "not a tensor"),)
    )
    with pytest.raises(ProviderBuildError, match=r"examplenpu_fp32: .*not str"):
        ExampleNpuProvider().build(model, context)


def _saved_plan(tmp_path: Path, provider: ExampleNpuProvider) -> tuple[Path, dict[str, object]]:
    """Build, copy the artifacts as a bundle holds them, close: (directory, metadata)."""
    model = SmallNet()
    with provider.build(model, _context(tmp_path, model)) as plan:
        saved = tmp_path / "saved"
        saved.mkdir()
        for name, path in plan.artifacts.items():
            shutil.copy2(path, saved / name)
        return saved, json.loads(json.dumps(plan.metadata))


def test_load_serves_the_saved_program_with_this_context_options(tmp_path: Path) -> None:
    saved, metadata = _saved_plan(tmp_path, ExampleNpuProvider())
    context = ProviderContext(artifact_dir=tmp_path / "load", options=NpuOptions(worker_threads=3))
    model, x = SmallNet(), torch.randn(5, 3, 8, 8)
    with ExampleNpuProvider().load(saved, metadata, context) as plan:
        assert plan.runner.device.worker_threads == 3
        # The loaded plan keeps its own copy of the program, in its plan directory.
        assert plan.artifacts[npu.PROGRAM_FILE].parent == context.plan_dir("examplenpu_fp32")
        out = plan(x)
        plan.synchronize()
        torch.testing.assert_close(out, model(x).detach())


def test_load_from_the_plans_own_directory(tmp_path: Path) -> None:
    model = SmallNet()
    context = _context(tmp_path, model)
    with ExampleNpuProvider().build(model, context) as built:
        directory, metadata = built.artifacts[npu.PROGRAM_FILE].parent, built.metadata
    with ExampleNpuProvider().load(directory, metadata, context) as plan:
        assert plan.artifacts[npu.PROGRAM_FILE] == directory / npu.PROGRAM_FILE


def test_load_refuses_a_program_name_that_is_a_path(tmp_path: Path) -> None:
    saved, metadata = _saved_plan(tmp_path, ExampleNpuProvider())
    context = ProviderContext(artifact_dir=tmp_path / "load")
    with pytest.raises(ProviderBuildError, match="no plain program file"):
        ExampleNpuProvider().load(saved, {**metadata, "program": "../program.tnpu"}, context)


def test_load_refuses_a_missing_program(tmp_path: Path) -> None:
    saved, metadata = _saved_plan(tmp_path, ExampleNpuProvider())
    (saved / npu.PROGRAM_FILE).unlink()
    with pytest.raises(ProviderBuildError, match="is missing"):
        ExampleNpuProvider().load(saved, metadata, ProviderContext(artifact_dir=tmp_path / "l"))


def test_load_refuses_the_other_plans_program(tmp_path: Path) -> None:
    saved, metadata = _saved_plan(tmp_path, ExampleNpuFastProvider())
    with pytest.raises(ProviderBuildError, match="frozen program"):
        ExampleNpuProvider().load(saved, metadata, ProviderContext(artifact_dir=tmp_path / "l"))
