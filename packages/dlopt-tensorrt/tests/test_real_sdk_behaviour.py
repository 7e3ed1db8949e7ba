"""What Torch-TensorRT 2.13 really does with dlopt's calls, simulated by the fake SDK
(conftest.py): a device without an index, save's retrace, the shared timing cache, the
TensorRT major each runtime needs, and where the TensorRT version is found."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest
import torch

from dlopt.plugin import (
    ExecutionTarget,
    Precision,
    ProviderContext,
    WorkloadCase,
    WorkloadProfile,
)
from dlopt_tensorrt import TensorRTOptions, TensorRTProvider, load_engine
from dlopt_tensorrt.compat import tensorrt_requirement
from dlopt_tensorrt.pins import NVIDIA_INDEX, install_command


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(16, 4)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.fc(features).relu()


def _workload() -> WorkloadProfile:
    return WorkloadProfile(
        (
            WorkloadCase("b1", args=(torch.randn(1, 16),), weight=3),
            WorkloadCase("b4", args=(torch.randn(4, 16),), weight=1),
            WorkloadCase("b32", args=(torch.randn(32, 16),), weight=1),
        ),
        name="serving",
    )


def _context(tmp_path: Path, target: str = "cuda") -> ProviderContext:
    return ProviderContext(
        target=ExecutionTarget(target), workload=_workload(), artifact_dir=tmp_path
    )


# 1. target "cuda" without an index ---------------------------------------------------


def test_target_cuda_without_an_index_builds_on_the_current_device(
    fake_trt: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trt = fake_trt()
    plan = TensorRTProvider(Precision.FP16).build(Net().eval(), _context(tmp_path))
    (call,) = trt.compile_calls
    assert call["device"] == torch.device("cuda", 0)
    assert plan.metadata["compile_options"]["device"] == "cuda:0"


def test_an_explicit_index_is_kept(fake_trt: Any, tmp_path: Path, monkeypatch: Any) -> None:
    trt = fake_trt()
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    TensorRTProvider(Precision.FP16).build(Net().eval(), _context(tmp_path, "cuda:1"))
    assert trt.compile_calls[0]["device"] == torch.device("cuda", 1)


# 3. a saved program keeps its dynamic batch -----------------------------------------


def test_a_saved_program_serves_every_case_shape(fake_trt: Any, tmp_path: Path) -> None:
    trt = fake_trt()
    context = _context(tmp_path)
    context.options = TensorRTOptions(save_engine=True)
    model = Net().eval()
    plan = TensorRTProvider(Precision.FP16).build(model, context)
    (save,) = trt.save_calls
    assert save["retrace"] is False
    loaded = load_engine(plan.artifacts["engine"])
    for case in _workload().cases:
        x = case.args[0]
        torch.testing.assert_close(loaded(x), model(x))
    assert plan.metadata["save_options"] == {"output_format": "exported_program", "retrace": False}


# 7. the timing cache belongs to the plan ---------------------------------------------


def test_the_timing_cache_lives_in_the_plan_directory(fake_trt: Any, tmp_path: Path) -> None:
    trt = fake_trt()
    TensorRTProvider(Precision.FP16).build(Net().eval(), _context(tmp_path))
    path = Path(trt.compile_calls[0]["timing_cache_path"])
    assert path.parent == tmp_path / "tensorrt_fp16"


def test_a_release_without_the_option_is_not_given_it(fake_trt: Any, tmp_path: Path) -> None:
    trt = fake_trt(api="minimal")
    TensorRTProvider(Precision.FP16).build(Net().eval(), _context(tmp_path))
    assert "timing_cache_path" not in trt.compile_calls[0]


# 6. install hints that name the index and the TensorRT major --------------------------


def test_the_install_command_names_nvidias_index() -> None:
    command = install_command("2.13.0+cu130", "13.0")
    assert command.startswith('pip install "torch-tensorrt==2.13.*" ')
    assert "--extra-index-url https://download.pytorch.org/whl/cu130" in command
    assert f"--extra-index-url {NVIDIA_INDEX}" in command


def test_missing_libraries_hint_names_the_index_and_the_major(
    sim: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    sim.metadata()
    for name in [m for m in sys.modules if m.split(".")[0] in ("torch_tensorrt", "tensorrt")]:
        monkeypatch.delitem(sys.modules, name)
    package = tmp_path / "torch_tensorrt"
    package.mkdir()
    (package / "__init__.py").write_text("raise OSError('libnvinfer.so.11: cannot open')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    availability = TensorRTProvider(Precision.FP16).probe(
        ProviderContext(target=ExecutionTarget("cuda"))
    )
    assert not availability.available
    hint = availability.install_hint
    assert f"--extra-index-url {NVIDIA_INDEX}" in hint
    assert "TensorRT 11" in hint and "tensorrt-cu13-libs" in hint
    assert "stub" in hint


@pytest.mark.parametrize(
    ("requires", "expected"),
    [
        (["torch<2.14,>=2.13", "tensorrt-cu13-libs<11.1.0,>=11.0.0"], ("tensorrt-cu13-libs", 11)),
        (
            ["tensorrt-cu12<10.14,>=10.13.0", "tensorrt-cu12-libs<10.14,>=10.13"],
            ("tensorrt-cu12", 10),
        ),
        (["tensorrt>=10.3.0,<10.4"], ("tensorrt", 10)),
        (["torch>=2.13", "packaging"], None),
        (None, None),
    ],
)
def test_tensorrt_requirement_is_read_from_metadata(requires: Any, expected: Any) -> None:
    assert tensorrt_requirement(requires) == expected


# 8. the TensorRT version without __tensorrt_version__ ---------------------------------


def test_tensorrt_version_without_the_old_attribute(
    fake_trt: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_trt(tensorrt_version=None)  # not exported since Torch-TensorRT 2.6
    monkeypatch.setitem(sys.modules, "tensorrt", types.SimpleNamespace(__version__="11.0.0.7"))
    availability = TensorRTProvider(Precision.FP16).probe(
        ProviderContext(target=ExecutionTarget("cuda"))
    )
    assert availability.available, availability.reason
    assert availability.sdk_versions["tensorrt"] == "11.0.0.7"
